"""`persalign generate` and `persalign serve`: a finished run's deployment put to use (issue #54).

generate prints each prompt's output on its own line (standard output) and what it took (standard error);
both adapt new users from --new-users FILE first (persalign/api/new_user.py) and say how long that took; serve
loads the deployment before it listens, so a wrong name fails at once, then answers OpenAI-style
chat-completions requests (persalign/api/serve.py) until Ctrl-C.

    persalign generate runs/demo/demo --deployment "ICL-RAG (4-shot)" --user "Abe Local" "Storm closes the harbour"
    persalign serve runs/demo/demo --deployment "ICL-RAG (4-shot)"
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from persalign.core.errors import PersalignError


def _deployment(args, say):
    """The named deployment, with --new-users adapted (what that took on standard error)."""
    from persalign.api.new_user import read_new_users
    from persalign.api.runs import Run

    deployment = Run(args.run_dir).deployment(args.deployment, args.seed, args.policy)
    if args.new_users:
        users = read_new_users(args.new_users)
        seconds = deployment.add_users(users)
        say(f"adapted {len(users)} new user(s) ({', '.join(users)}) in {seconds:.2f} s: "
            f"{_what_adapts(deployment.planned, users)}", file=sys.stderr)
    return deployment


def _what_adapts(planned, users: dict) -> str:
    """What a new user's records became for this kind of deployment."""
    texts, pairs = (sum(len(getattr(u, kind)) for u in users.values()) for kind in ("texts", "pairs"))
    if planned.needs:
        return (f"{texts} text(s), each paired with a hard negative mined from the run's train users, and {pairs} "
                "stated preference(s)")
    if planned.properties.uses_demonstrations:
        return (f"{texts} text(s) and the chosen answers of {pairs} preference(s) as demonstrations (nothing "
                "trained to adapt)")
    return "nothing to adapt: this deployment reads nothing of its user"


def generate(args, say) -> None:
    """`say`: the command's printer (control characters escaped)."""
    prompts = list(args.prompts)
    if args.file:
        prompts += [line for line in Path(args.file).read_text(encoding="utf-8").splitlines() if line.strip()]
    if not prompts:
        raise PersalignError("generate: no prompt (give PROMPT or --file)")
    started = time.perf_counter()
    for text in _deployment(args, say).generate(args.user, prompts):
        say(text)
    say(f"generated {len(prompts)} output(s) in {time.perf_counter() - started:.1f} s (the run's models loaded "
        "and the trained component read back included)", file=sys.stderr)


def serve(args, say) -> None:
    from persalign.api.serve import serve as serve_endpoint

    if not 0 <= args.port <= 65535:
        raise PersalignError(f"serve: --port {args.port} is not a TCP port (0-65535)")
    started = time.perf_counter()
    deployment = _deployment(args, say)
    users = deployment.users()
    say(f"loaded {args.deployment!r} of {args.run_dir} in {time.perf_counter() - started:.1f} s; {len(users)} users "
        f"(e.g. {', '.join(users[:3])})")
    say(f"serving at http://{args.host}:{args.port}/v1 (POST /v1/chat/completions, model {args.deployment!r}, the "
        "request's user field names the person); Ctrl-C stops")
    serve_endpoint(deployment, args.deployment, args.host, args.port)
