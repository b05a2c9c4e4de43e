"""Zero-shot greedy decoding: the base policy with no user information.

Its policy accuracy uses s_base (Eq. 4): the paper's "Prior" row.

    persalign run demo decoders='[{name: zero_shot}]'
"""

from __future__ import annotations

from persalign.config import DecoderConfig
from persalign.decoders.base import EvalContext
from persalign.records import UserItem
from persalign.registry import register_decoder


@register_decoder("zero_shot")
class ZeroShot:
    """No demonstrations; greedy decoding; scored with s_base (Eq. 4)."""

    seed_dependent = False

    def __init__(self, config: DecoderConfig):
        self.label = config.label or "Zero-Shot"

    def demos(self, context: EvalContext, user: str, example_id: str, query_input: str, seed: int) -> list[UserItem]:
        return []
