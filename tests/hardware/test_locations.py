"""Locations: exact region ids, prefixes that end at a boundary, and areas across suppliers."""

from __future__ import annotations

import pytest

from nodus_cli import catalog
from nodus_cli.hardware import locations


@pytest.mark.parametrize(
    ("location", "region"),
    [
        ("us-east-1", "us-east-1"),  # exact
        ("US-EAST-1", "us-east-1"),  # case does not matter
        ("us-east", "us-east-1"),  # prefix, AWS spelling
        ("us-east", "us-east1"),  # prefix, GCP spelling
        ("us-east-1", "us-east-1a"),  # a zone of the region
        ("europe-west1", "europe-west1"),
        ("us", "us-east-1"),  # area: by prefix
        ("us", "eastus"),  # area: Azure spells it differently
        ("us", "Texas, US, NA"),  # area: vast's "Place, CC, CONTINENT"
        ("us", "US-1"),
        ("us", "ARIZONA_USA"),
        ("eu", "eu-west-1"),
        ("eu", "europe-west4"),
        ("eu", "westeurope"),
        ("eu", "FINLAND"),
        ("eu", "FIN-01"),
        ("europe", "eu-west-1"),  # alias of the area eu
        ("europe", "westeurope"),
        ("asia", "ap-northeast-1"),
        ("asia", "asia-east1"),
        ("asia", "Japan, JP, AS"),
        ("na", "ca-central-1"),  # North America includes Canada
        ("ca", "ca-central-1"),
        ("oceania", "ap-southeast-2"),
    ],
)
def test_matches(location: str, region: str) -> None:
    assert locations.matches(location, region)


@pytest.mark.parametrize(
    ("location", "region"),
    [
        ("us-east-1", "us-east-10"),  # a prefix must end at a boundary
        ("europe-west1", "europe-west10"),
        ("europe-west1", "europe-west12"),
        ("us-w", "us-west-2"),  # not in the middle of a word
        ("us", "ca-central-1"),  # Canada is not the United States
        ("us", "eu-west-1"),
        ("eu", "us-east-1"),
        ("eu", "Texas, US, NA"),
        ("asia", "ap-southeast-2"),  # Sydney is Oceania
        ("asia", "eu-west-1"),
        ("us-east-1", "us-east-2"),
        ("us", ""),
    ],
)
def test_does_not_match(location: str, region: str) -> None:
    assert not locations.matches(location, region)


@pytest.mark.parametrize(
    ("location", "region"),
    [
        ("eu", "europe-north9"),  # a region the table does not list: areas from its id
        ("asia", "ap-south-9"),
        ("eu", "Lisbon, PT, EU"),
        ("us", "Ohio, US, NA"),
        ("na", "Ohio, US, NA"),
        ("sa", "southamerica-west9"),
    ],
)
def test_regions_missing_from_the_table_get_areas_from_their_spelling(
    location: str, region: str
) -> None:
    assert locations.matches(location, region)


def test_area_codes_and_aliases() -> None:
    assert locations.area("EU") == "eu"
    assert locations.area("europe") == "eu"
    assert locations.area("us-east-1") is None
    assert {"us", "eu", "asia"} <= set(locations.areas())


def test_is_known() -> None:
    assert locations.is_known("eu")
    assert locations.is_known("us-east-1")
    assert locations.is_known("us-east")
    assert not locations.is_known("mars")
    assert locations.is_known("moon-base-1", {"moon-base-1"})


def test_every_embedded_catalog_region_is_in_the_table() -> None:
    """Prefixes alone cannot place "FINLAND" or "westeurope": the table must list them."""
    regions = {o.region for o in catalog.embedded().offers}
    areas = {r: locations.areas_of(r) for r in regions}
    # A few suppliers give no place at all ("default", a UUID, ""): nothing can match them
    # but their exact id.
    placeless = {r for r, a in areas.items() if not a}
    assert placeless <= {"", "default", "a3111bd4-550a-47d0-838a-0a52bff2ae3f"}
    assert any("us" in a for a in areas.values())
    assert any("eu" in a for a in areas.values())
    assert any("asia" in a for a in areas.values())
