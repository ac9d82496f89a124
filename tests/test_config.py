"""config.toml: [local], [catalog], [limits] and [functions], with the words a user reads when
it is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodus_cli import config
from nodus_cli.config import CatalogConfig, CatalogSource, LimitsConfig
from nodus_cli.errors import NodusError


@pytest.fixture
def cfg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "config.toml"
    monkeypatch.setenv("NODUS_CONFIG", str(path))
    return path


def error(fn: object) -> str:
    assert callable(fn)
    with pytest.raises(NodusError) as caught:
        fn()
    text = caught.value.message
    if caught.value.hint:
        text += "\nhint: " + caught.value.hint
    return text


def test_no_file_means_defaults(cfg: Path) -> None:
    assert config.catalog() == CatalogConfig()
    assert config.catalog().max_age_days == 30.0
    assert config.limits() == LimitsConfig()
    assert not config.limits().any
    assert config.local() == config.LocalConfig()


def test_a_full_configuration(cfg: Path) -> None:
    cfg.write_text(
        """
[local]
price_per_hour = 1.5

[catalog]
sources = [
  "https://example.com/catalogs/v7/aws/vms.csv",
  "mine = https://example.com/prices.csv",
]
max_age_days = 7

[limits]
max_spend_per_day = 200.0
max_spend_per_month = 3000
max_price_per_hour = 40.0
"""
    )
    assert config.catalog() == CatalogConfig(
        (
            CatalogSource("https://example.com/catalogs/v7/aws/vms.csv"),
            CatalogSource("https://example.com/prices.csv", "mine"),
        ),
        7.0,
        cfg,
    )
    assert config.limits() == LimitsConfig(200.0, 3000.0, 40.0, cfg)
    assert isinstance(config.limits().max_spend_per_month, float)
    assert config.local().price_per_hour == 1.5


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (
            "[limits]\nmax_price_per_hour = true\n",
            "limits.max_price_per_hour must be a positive number (USD per hour), not true"
            "\nhint: write it as, e.g., max_price_per_hour = 40.0",
        ),
        (
            "[limits]\nmax_spend_per_day = -5\n",
            "limits.max_spend_per_day must be a positive number (USD), not -5",
        ),
        ("[limits]\nmax_spend_per_day = 0\n", "must be a positive number (USD), not 0"),
        ("[limits]\nmax_spend_per_month = inf\n", "max_spend_per_month must be a positive number"),
        ("[limits]\nmax_spend_per_month = nan\n", "not nan"),
        (
            '[limits]\nmax_price_per_hour = "40"\n',
            'max_price_per_hour must be a positive number (USD per hour), not "40" (a string)',
        ),
        (
            "[limits]\nmax_price_per_hr = 40\n",
            "limits.max_price_per_hr: unknown key; did you mean max_price_per_hour? (allowed: "
            "max_spend_per_day, max_spend_per_month, max_price_per_hour)",
        ),
        ("limits = 40\n", "[limits] must be a table"),
        (
            "[limit]\nmax_price_per_hour = 40\n",
            "[limit]: unknown section; did you mean [limits]?\nhint: rename the section to "
            "[limits]",
        ),
    ],
)
def test_limits_mistakes(cfg: Path, text: str, words: str) -> None:
    cfg.write_text(text)
    message = error(config.limits)
    assert message.startswith(f"{cfg}: ")
    assert words in message


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (
            '[catalog]\nsources = "https://example.com/vms.csv"\n',
            'catalog.sources must be a list of URLs in quotes, not "https://example.com/vms.csv" '
            "(a string)",
        ),
        ("[catalog]\nsources = [1]\n", "catalog.sources[0] must be a URL in quotes, not 1"),
        (
            '[catalog]\nsources = ["https://a.example/x.csv", "example.com/vms.csv"]\n',
            "catalog.sources[1]: 'example.com/vms.csv' is not an http(s) URL",
        ),
        (
            '[catalog]\nsources = ["my source=https://example.com/x.csv"]\n',
            "catalog.sources[0]: 'my source' is not a source name",
        ),
        (
            "[catalog]\nmax_age_days = 0\n",
            "catalog.max_age_days must be a positive number (days), not 0",
        ),
        ("[catalog]\nmax_age_days = false\n", "max_age_days must be a positive number (days)"),
        (
            '[catalog]\nsource = ["https://example.com/x.csv"]\n',
            "catalog.source: unknown key; did you mean sources?",
        ),
        ("[catalogue]\n", "[catalogue]: unknown section; did you mean [catalog]?"),
    ],
)
def test_catalog_mistakes(cfg: Path, text: str, words: str) -> None:
    cfg.write_text(text)
    message = error(config.catalog)
    assert message.startswith(f"{cfg}: ")
    assert words in message


def test_sections_are_read_separately_but_near_misses_always_count(cfg: Path) -> None:
    cfg.write_text("[limits]\nmax_price_per_hour = -1\n[other_tool]\nx = 1\n")
    assert config.catalog() == CatalogConfig(path=cfg)  # another section's mistake
    assert config.local() == config.LocalConfig()
    assert "max_price_per_hour" in error(config.limits)


def test_an_unreadable_file(cfg: Path) -> None:
    cfg.write_text("[limits\n")
    assert "cannot read the configuration" in error(config.limits)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("https://example.com/v7/aws/vms.csv", CatalogSource("https://example.com/v7/aws/vms.csv")),
        ("aws=https://example.com/x.csv", CatalogSource("https://example.com/x.csv", "aws")),
        (" gcp = http://example.com/x.csv ", CatalogSource("http://example.com/x.csv", "gcp")),
        # An = inside the URL's query is not a name.
        ("https://example.com/x.csv?a=b", CatalogSource("https://example.com/x.csv?a=b")),
    ],
)
def test_source_entries(text: str, expected: CatalogSource) -> None:
    assert config.parse_source(text) == expected


def test_functions_keep_warm(cfg: Path) -> None:
    assert config.functions().keep_warm == config.DEFAULT_KEEP_WARM == 60.0
    cfg.write_text("[functions]\nkeep_warm = 0\n")
    assert config.functions().keep_warm == 0.0
    cfg.write_text("[functions]\nkeep_warm = 2.5\n")
    assert config.functions().keep_warm == 2.5


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (
            "[functions]\nkeep_warm = -1\n",
            "functions.keep_warm must be a number >= 0 (seconds), not -1\n"
            "hint: write it as, e.g., keep_warm = 60",
        ),
        ("[functions]\nkeep_warm = true\n", "functions.keep_warm must be a number >= 0"),
        ("[functions]\nkeepwarm = 5\n", "functions.keepwarm: unknown key; did you mean keep_warm?"),
    ],
)
def test_functions_mistakes(cfg: Path, text: str, words: str) -> None:
    cfg.write_text(text)
    message = error(config.functions)
    assert message.startswith(f"{cfg}: ")
    assert words in message


def test_slurm_container_is_docker_or_podman(cfg: Path) -> None:
    assert config.slurm().container == "docker"
    cfg.write_text('[slurm]\ncontainer = "podman"\n')
    assert config.slurm().container == "podman"
    cfg.write_text('[slurm]\ncontainer = "apptainer"\n')
    message = error(config.slurm)
    assert message == (
        f"{cfg}: slurm.container = 'apptainer': nodus runs images on Slurm nodes with docker "
        "or podman only so far\n"
        'hint: write container = "docker" (each node\'s Docker engine) or "podman"'
    )


def test_cluster_prices_are_read_alike_for_slurm_and_kubernetes(cfg: Path) -> None:
    cfg.write_text(
        "[slurm]\nprice_per_hour = 4.0\nprices = { gpu-a = 12.5 }\n"
        '[kubernetes]\nprices = { "p5.48xlarge" = 98.3 }\n'
    )
    assert (config.slurm().price_per_hour, config.slurm().prices) == (4.0, {"gpu-a": 12.5})
    assert config.kubernetes().prices == {"p5.48xlarge": 98.3}
    cfg.write_text('[slurm]\nprices = 3\n[kubernetes]\nprices = "x"\n')
    assert error(config.slurm) == (
        f"{cfg}: slurm.prices must be a table of node or partition names to USD per hour\n"
        "hint: write it as, e.g., prices = { gpu-a = 12.0 }"
    )
    assert error(config.kubernetes) == (
        f"{cfg}: kubernetes.prices must be a table of node names or label values to USD per "
        'hour\nhint: write it as, e.g., prices = { "p5.48xlarge" = 98.3 }'
    )
    cfg.write_text("[kubernetes]\nprices = { n1 = -2 }\n")
    assert "kubernetes.prices.n1" in error(config.kubernetes)


def test_a_cluster_price_not_set_is_none_and_a_declared_0_is_a_price(cfg: Path) -> None:
    assert config.slurm().price_per_hour is None
    assert config.kubernetes().price_per_hour is None
    assert config.slurm().price_of("gpu-a", "gpu") == (None, "[slurm] price_per_hour")
    assert config.kubernetes().price_of("n1", {}) == (None, "[kubernetes] price_per_hour")
    cfg.write_text("[slurm]\nprice_per_hour = 0\n[kubernetes]\nprice_per_hour = 0\n")
    assert config.slurm().price_of("gpu-a", "gpu") == (0.0, "[slurm] price_per_hour")
    assert config.kubernetes().price_of("n1", {}) == (0.0, "[kubernetes] price_per_hour")
    cfg.write_text("[kubernetes]\nprice_per_hour = true\n")
    assert error(config.kubernetes) == (
        f"{cfg}: kubernetes.price_per_hour must be a number >= 0 (USD per hour), not true\n"
        "hint: write it as, e.g., price_per_hour = 4.0"
    )


def test_a_declared_cluster_price_says_which_entry_declares_it(cfg: Path) -> None:
    cfg.write_text(
        "[slurm]\nprice_per_hour = 4.0\nprices = { gpu-a = 12.5, big = 30.0 }\n"
        '[kubernetes]\nprice_per_hour = 2.0\nprices = { "p4d.24xlarge" = 20.0, n1 = 9.0 }\n'
    )
    slurm = config.slurm()
    assert slurm.price_of("gpu-a", "big") == (12.5, "[slurm] prices: 'gpu-a' (the node)")
    assert slurm.price_of("gpu-b", "big") == (30.0, "[slurm] prices: 'big' (its partition)")
    assert slurm.price_of("gpu-b", None) == (4.0, "[slurm] price_per_hour")
    kube = config.kubernetes()
    labels = {"node.kubernetes.io/instance-type": "p4d.24xlarge"}
    assert kube.price_of("n1", labels) == (9.0, "[kubernetes] prices: 'n1' (the node)")
    assert kube.price_of("n2", labels) == (
        20.0,
        "[kubernetes] prices: 'p4d.24xlarge' (label node.kubernetes.io/instance-type)",
    )
    assert kube.price_of("n2", {}) == (2.0, "[kubernetes] price_per_hour")
