"""Kubernetes as a target (``--target kubernetes``): each stage one ``batch/v1`` Job.

Only :class:`KubernetesTarget` is public; choosing another target never imports this
package (the registry names it as a string), and the official ``kubernetes`` client is
imported by this package alone (an optional extra: ``nodus-cli[kubernetes]``)."""

from __future__ import annotations

from nodus_cli.targets.kubernetes.target import KubernetesTarget

__all__ = ["KubernetesTarget"]
