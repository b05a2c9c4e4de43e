"""The endpoint judge against a real OpenAI-compatible server (issue #41): `transformers serve` (from PyPI,
transformers[serving]) serving a tiny model folder, asked through the `openai` client, answers exactly what the
same model answers as an in-process judge (greedy both), so served judges and local ones give one tally."""

import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from persalign.metrics.judge import LMJudge, endpoint_judge, judge_pairs


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def served_tiny_model(tmp_path, tiny_lm):
    folder = tmp_path / "tiny"
    tiny_lm.model.save_pretrained(folder)
    tiny_lm.tokenizer.save_pretrained(folder)
    port = free_port()
    command = [sys.executable, "-c", "from transformers.cli.transformers import main; main()", "serve", str(folder),
               "--host", "127.0.0.1", "--port", str(port)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    try:
        deadline = time.time() + 90
        while time.time() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except OSError:
                assert server.poll() is None, "transformers serve exited"
                time.sleep(0.5)
        else:
            pytest.fail("transformers serve did not answer /health within 90 s")
        yield f"http://127.0.0.1:{port}/v1", str(folder)
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.slow
def test_a_served_judge_answers_as_the_same_model_in_process(served_tiny_model, tiny_lm):
    url, name = served_tiny_model
    contexts, queries = ["The user's rubric:\n- short answers"] * 3, [f"Question {i}?" for i in range(3)]
    candidates, references = [f"Answer {i}" for i in range(3)], [f"Other answer {i}" for i in range(3)]
    served = judge_pairs(endpoint_judge(url, name), contexts, queries, candidates, references)
    local = judge_pairs(LMJudge(tiny_lm), contexts, queries, candidates, references)
    assert served.outcomes == local.outcomes and served.biased == local.biased
    assert served.judged + served.invalid == 3  # a random model's answers: counted, never silently a tie
