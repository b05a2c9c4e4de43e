"""`persalign serve` (issue #54): a finished run's deployment as an OpenAI-compatible endpoint, talked to over
real HTTP with the `openai` client. The reply equals the stored generation (= `generate`'s) for the same user and
prompt, concurrent requests are each answered with their own user's output, bad requests get a 4xx with a
message and no traceback, and the command binds to 127.0.0.1 unless told otherwise.

    pytest tests/test_serve.py
"""

from __future__ import annotations

import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from persalign.api.new_user import NewUser
from persalign.api.serve import server as endpoint_server
from persalign.core.records import Comparison
from tests.bad_input_helpers import cli_error
from tests.test_generate import finished  # noqa: F401  (the module's finished tiny run)

pytestmark = pytest.mark.xdist_group("serve")  # one worker: the module's run is made once, not once per worker

SERVED = "LoRE"  # ARGS with a personalized reward model: the deployment with the most state per user


def serving(deployment):
    """(the server, its thread, the base URL): the endpoint on a free port of this machine."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = endpoint_server(deployment, SERVED)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    return server, thread, f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


@pytest.fixture(scope="module")
def endpoint(finished):  # noqa: F811
    """(the stored rows of the served deployment, a run user, the openai client, the base URL)."""
    deployment = finished.deployment(SERVED)
    rows = finished.rows().query("deployment == @SERVED")
    twin_of = rows["user"].iloc[0]
    deployment.add_users({"Twin": NewUser("Twin", [], twin_pairs(deployment, twin_of))})
    server, thread, url = serving(deployment)
    yield rows, twin_of, openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=120), url
    server.should_exit = True
    thread.join(timeout=30)


def twin_pairs(deployment, user: str) -> list[Comparison]:
    """The run user's own support pairs, stated by a new user (who should then be adapted to the same person)."""
    run_ctx = deployment._parts()[0]
    by_id = {c.id: c for c in run_ctx.dataset.comparisons}
    return [Comparison(f"twin-{i}", "Twin", by_id[i].prompt, by_id[i].chosen, by_id[i].rejected)
            for i in run_ctx.split.support[user]]


def ask(client, user, prompt, **extra) -> str:
    reply = client.chat.completions.create(model=SERVED, user=user, messages=[{"role": "user", "content": prompt}],
                                           **extra)
    return reply.choices[0].message.content


def test_the_reply_is_the_stored_generation_for_that_user_and_prompt(endpoint):
    rows, twin_of, client, _ = endpoint
    row = rows.iloc[0]
    assert ask(client, row["user"], row["prompt"], temperature=0.7, max_tokens=5) == row["generation"]
    assert [m.id for m in client.models.list().data] == [SERVED]
    mine = rows.query("user == @twin_of").iloc[-1]  # a new user adapted from the same pairs writes the same
    assert ask(client, "Twin", mine["prompt"]) == mine["generation"]


def test_concurrent_requests_each_get_their_own_users_output(endpoint):
    rows, _, client, _ = endpoint
    asks = [rows.iloc[i % len(rows)] for i in range(24)]
    with ThreadPoolExecutor(max_workers=12) as pool:
        futures = [pool.submit(ask, client, row["user"], row["prompt"]) for row in asks]
        answers = [future.result(timeout=300) for future in futures]
    assert answers == [row["generation"] for row in asks]
    assert len({row["user"] for row in asks}) > 1


class OverlapCounter:
    """A deployment that records how many generations ran at once (the models are shared: never two)."""

    def __init__(self):
        self.running, self.most, self.guard = 0, 0, threading.Lock()

    def generate(self, user, prompts):
        with self.guard:
            self.running += 1
            self.most = max(self.most, self.running)
        time.sleep(0.02)
        with self.guard:
            self.running -= 1
        return [f"{user}: {prompt}" for prompt in prompts]


def test_generations_never_overlap():
    counter = OverlapCounter()
    server, thread, url = serving(counter)
    client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=60)
    try:
        with ThreadPoolExecutor(max_workers=12) as pool:
            answers = list(pool.map(lambda i: ask(client, f"u{i % 3}", f"p{i}"), range(24)))
    finally:
        server.should_exit = True
        thread.join(timeout=30)
    assert answers == [f"u{i % 3}: p{i}" for i in range(24)]
    assert counter.most == 1


def test_bad_requests_get_a_4xx_with_a_message_never_a_traceback(endpoint):
    rows, _, client, url = endpoint
    prompt = rows["prompt"].iloc[0]
    with pytest.raises(openai.BadRequestError, match="user 'nobody': not an adaptation user of this run"):
        ask(client, "nobody", prompt)
    with pytest.raises(openai.NotFoundError, match="this server serves 'LoRE'"):
        client.chat.completions.create(model="gpt-4", user="x", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.BadRequestError, match="stream: streaming is not served"):
        ask(client, rows["user"].iloc[0], prompt, stream=True)
    bad = {"not JSON": dict(content=b"{oops", headers={"Content-Type": "application/json"}),
           "no messages": dict(json={"model": SERVED, "user": "x"}),
           "no user message": dict(json={"model": SERVED, "user": "x", "messages": [{"role": "system",
                                                                                     "content": "hi"}]}),
           "no user field": dict(json={"model": SERVED, "messages": [{"role": "user", "content": "hi"}]})}
    for what, request in bad.items():
        reply = httpx.post(f"{url}/chat/completions", timeout=60, **request)
        assert reply.status_code == 400, (what, reply.text)
        assert reply.json()["error"]["message"] and "Traceback" not in reply.text, what


def test_the_command_binds_to_this_machine_by_default_and_refuses_a_wrong_deployment(finished, capsys):  # noqa: F811
    from persalign.cli.commands import HANDLERS
    from persalign.cli.parser import build_parser

    args = build_parser(HANDLERS).parse_args(["serve", str(finished.path), "--deployment", SERVED])
    assert (args.host, args.port) == ("127.0.0.1", 8000)
    line = cli_error(capsys, ["serve", str(finished.path), "--deployment", "Nope"])
    assert line.startswith("persalign: error: ") and "no deployment 'Nope'" in line
    line = cli_error(capsys, ["serve", str(finished.path), "--deployment", SERVED, "--port", "70000"])
    assert "--port 70000 is not a TCP port" in line
