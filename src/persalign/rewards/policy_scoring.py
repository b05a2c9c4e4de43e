"""RGD scoring functions of whole responses (paper Eq. 5-6), in one pass.

    s_RGD(y|x) = Σ_t [ log π(y_t | x, y<t) + λ · r(x, y<=t) ]

Per batch: one prefill of the prompts, then one forward of all responses on
that cache gives log π for every token; the RM's prefix rewards r(x, y<=t)
for all t come from one teacher-forced forward of the RM backbone (cached in
frozen mode). With the shared frozen backbone the RM states are the policy's
own hidden states, so the same forward serves both.

    python benchmarks/bench_policy_scoring.py --quick
"""

from __future__ import annotations

import numpy as np
import torch

from persalign.decoding import prefill
from persalign.rewards.backbone import pad_states
from persalign.scoring import continue_from_prefill


@torch.no_grad()
def rgd_components(policy, method, backbone, users, prompts, responses, batch_size: int = 16):
    """(Σ_t log π, Σ_t prefix reward, sequence reward) per response."""
    shared = (backbone is not None and backbone.lm.model is policy.model and not backbone.trainable
              and not method.token_level)
    head = policy.model.get_output_embeddings()
    lp_sum, r_sum, r_seq = [], [], []
    for start in range(0, len(prompts), batch_size):
        batch_p, batch_r = prompts[start : start + batch_size], responses[start : start + batch_size]
        batch_u = users[start : start + batch_size]
        unique = list(dict.fromkeys(tuple(p) for p in batch_p))
        owner = [unique.index(tuple(p)) for p in batch_p]
        state = prefill(policy, [list(p) for p in unique])
        hidden, first = continue_from_prefill(policy, state, owner, [r or [policy.tokenizer.pad_token_id] for r in batch_r])
        for i, r in enumerate(batch_r):
            if not r:
                lp_sum.append(0.0)
                continue
            tail = torch.log_softmax(head(hidden[i, : len(r) - 1]).float(), -1)[torch.arange(len(r) - 1), r[1:]]
            lp_sum.append(float(first[i, r[0]] + tail.sum()))
        states = [hidden[i, : len(r)].float() for i, r in enumerate(batch_r)] if shared else \
            method.features(backbone, batch_p, batch_r)
        padded, mask = pad_states([s if len(s) else torch.zeros((0, padded_width(hidden))) for s in states])
        ids = method.user_ids(batch_u)
        prefix = method.prefix_rewards(padded, mask, ids)
        last = (mask.sum(-1) - 1).clamp(min=0)
        r_sum += prefix.sum(-1).tolist()
        r_seq += (prefix.gather(1, last[:, None]).squeeze(1) * mask.any(-1)).tolist()
    return np.array(lp_sum), np.array(r_sum), np.array(r_seq)


def padded_width(hidden: torch.Tensor) -> int:
    return hidden.shape[-1]
