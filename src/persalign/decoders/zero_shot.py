"""Zero-shot greedy decoding: the base policy with no user information.

Its policy accuracy uses s_base (Eq. 4): the paper's "Prior" row. It is the
reference every gain and win rate is measured against.

    persalign run demo decoders='[{name: zero_shot}]'
"""

from __future__ import annotations

from persalign.core.registry import register_decoder
from persalign.decoders.base import DeploymentProperties
from persalign.decoders.prompted import PromptedDeployment


@register_decoder("zero_shot")
class ZeroShot(PromptedDeployment):
    """No demonstrations; greedy decoding; scored with s_base (Eq. 4)."""

    properties = DeploymentProperties(reference_baseline=True)

    @staticmethod
    def default_label(config) -> str:
        return "Zero-Shot"
