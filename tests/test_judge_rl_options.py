"""Every judge and RL option checked before any work, and an endpoint that never answers, or answers nonsense,
is one line or an invalid answer — never a half-hour hang or a traceback (issue #56).

    pytest tests/test_judge_rl_options.py
"""

from __future__ import annotations

import http.server
import threading
import time

import pytest

from persalign.core.errors import ConfigError
from persalign.metrics.judge import endpoint_judge
from tests.bad_input_helpers import cli_error

# before (41e66f0) each of these was accepted: steps 0 / -1 / 1e9 tuned (or trained by epochs), the rest ended in
# tracebacks from TRL / PEFT / transformers after other cells ran, or judged nothing without a word
REFUSED = [
    ("rl.steps=0", "rl.steps: 0 is not allowed (must be an integer from 1 to 100000)"),
    ("rl.steps=-1", "rl.steps: -1 is not allowed (must be an integer from 1 to 100000)"),
    ("rl.steps=1000000000", "rl.steps: 1000000000 is not allowed (must be an integer from 1 to 100000)"),
    ("rl.generations=1", "rl.generations: 1 is not allowed (must be an integer >= 2 (GRPO compares a group))"),
    ("rl.learning_rate=.nan", "rl.learning_rate: nan is not allowed (must be a finite number > 0)"),
    ("rl.lora_rank=0", "rl.lora_rank: 0 is not allowed (must be an integer >= 1)"),
    ("rl.temperature=0", "rl.temperature: 0.0 is not allowed (must be a finite number > 0)"),
    ("judge.max_new_tokens=0", "judge.max_new_tokens: 0 is not allowed (must be an integer >= 1)"),
    ("judge.context_items=-1", "judge.context_items: -1 is not allowed (must be an integer >= 0)"),
    ("judge.timeout_s=0", "judge.timeout_s: 0.0 is not allowed (must be a finite number > 0)"),
    ("judge.retries=-1", "judge.retries: -1 is not allowed (must be an integer from 0 to 10)"),
    ("rl.enabled=true", "rl.enabled: true, but no reward method to tune the policy with (methods is empty); add "
                        "one, e.g. 'methods=[{name: global_rm}]'"),
    ("judge.endpoint=http://127.0.0.1:9/v1", "judge.endpoint: 'http://127.0.0.1:9/v1' is set but judge.models names "
                                            "no model it serves, so nothing would be judged; set judge.models=[NAME]"),
]


@pytest.mark.parametrize("override, message", REFUSED)
def test_judge_and_rl_options_are_refused_before_any_work_in_one_line(tmp_path, capsys, override, message):
    line = cli_error(capsys, ["run", "demo-baselines", "-o", str(tmp_path / "run"), override])
    assert line.startswith("persalign: error: ") and line.endswith(f".{message}"), line
    assert not (tmp_path / "run").exists()


def test_an_endpoint_url_without_a_host_is_refused(tmp_path, capsys):
    line = cli_error(capsys, ["run", "demo-baselines", "-o", str(tmp_path / "run"), "judge.models=[m]",
                              "judge.endpoint=http://[::1"])
    assert line.endswith(".judge.endpoint: 'http://[::1' is not an http(s) URL with a host (e.g. "
                         "http://127.0.0.1:8000/v1)"), line


class Server:
    """A local HTTP server whose handler answers as told: 'silent' never answers, else the body given."""

    def __init__(self, behaviour: str, bad_models: bool = False):
        outer, self.bad_models = self, bad_models

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self):
                if behaviour == "silent":
                    outer.release.wait(30)
                    return
                models = self.path.endswith("/models") and not outer.bad_models
                body = (b'{"object": "list", "data": []}' if models else behaviour.encode())
                self.send_response(200)
                self.send_header("Content-Type", "text/html" if body.startswith(b"<") else "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

        self.release = threading.Event()
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self):
        self.release.set()
        self.httpd.shutdown()


def test_an_endpoint_that_never_answers_is_refused_within_its_timeout():
    """Before: the client waited 600 s × 3 tries (no answer in 90 s of the issue's test)."""
    server = Server("silent")
    try:
        started = time.perf_counter()
        with pytest.raises(ConfigError, match=r"no answer within 1 s × 1 tries \(judge.timeout_s, judge.retries\)"):
            endpoint_judge(server.url, "m", timeout_s=1.0, retries=0)
        assert time.perf_counter() - started < 10
    finally:
        server.close()


@pytest.mark.parametrize("body", ["{}", '{"choices": []}', "<html><body>proxy login</body></html>",
                                  '{"choices": [{"message": {"content": null}}]}'])
def test_a_malformed_answer_is_an_invalid_answer_not_a_traceback(body):
    """Before: `{}` without choices and an HTML page answered 200 ended in AttributeError / TypeError."""
    server = Server(body)
    try:
        judge = endpoint_judge(server.url, "m", timeout_s=5.0, retries=0)
        assert judge(["Which is closer, A or B?"]) == [""]  # unparseable: counted as invalid by judge_pairs
    finally:
        server.close()


def test_a_server_that_is_not_the_openai_api_is_refused_in_one_line():
    server = Server("<html><body>proxy login</body></html>", bad_models=True)
    try:
        with pytest.raises(ConfigError, match="its answer to GET /models is not the OpenAI API's"):
            endpoint_judge(server.url, "m", timeout_s=5.0, retries=0)
    finally:
        server.close()
