"""A finished run's deployment served as an OpenAI-compatible chat-completions endpoint (issue #54).

`POST /v1/chat/completions` answers with `RunDeployment.generate` (api/deploy.py): the request's `user` field
names the person (one of the run's adaptation users, or a new user adapted at start-up), and the text of its
last user message is the task's input (an article to write a headline for, a post to summarise). The
deployment builds its own prompt from the run's task and decodes as the run measured it, so sampling
options (temperature, top_p, max_tokens) are read and not applied; `stream` and `n > 1` are refused.
`GET /v1/models` lists the one deployment served. Bad requests get a 4xx with OpenAI's error shape
(`{"error": {"message", "type", "param", "code"}}`), never a traceback. Requests are answered one at a time
(the models are shared and not thread-safe); concurrent ones wait their turn.

    persalign serve runs/demo/demo --deployment "ICL-RAG (4-shot)"     # http://127.0.0.1:8000/v1
    curl -s http://127.0.0.1:8000/v1/chat/completions -H 'Content-Type: application/json' -d '{"model":
        "ICL-RAG (4-shot)", "user": "Abe Local", "messages": [{"role": "user", "content": "Storm closes the harbour"}]}'
"""

from __future__ import annotations

import threading
import time
import uuid

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict

from persalign.core.errors import PersalignError

class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")  # name, tool_calls, ...: read, not used
    role: str
    content: str | list | None = None


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="allow")  # temperature, max_tokens, top_p, ...: read, not applied
    model: str
    messages: list[ChatMessage]
    user: str | None = None
    stream: bool = False
    n: int = 1


class RequestError(Exception):
    """A request the endpoint refuses: its HTTP status and one line for the client."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code


def error_body(message: str, kind: str, param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def prompt_of(request: ChatRequest) -> str:
    """The text of the last user message (a string, or the text parts of a list of parts)."""
    users = [m for m in request.messages if m.role == "user"]
    if not users:
        raise RequestError(400, "messages: no message with role 'user' (its text is the task's input)", "messages")
    content = users[-1].content
    if isinstance(content, list):
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict)
                          and part.get("type") == "text")
    if not content or not content.strip():
        raise RequestError(400, "messages: the last user message has no text", "messages")
    return content


def check_request(request: ChatRequest, served: str) -> str:
    """The user the request names, once every refusal has been checked."""
    if request.model != served:
        raise RequestError(404, f"model {request.model!r}: this server serves {served!r} (GET /v1/models)",
                           "model", "model_not_found")
    if request.stream:
        raise RequestError(400, "stream: streaming is not served (the deployment's output comes whole)", "stream")
    if request.n != 1:
        raise RequestError(400, f"n = {request.n}: one choice per request (the deployment's decoding is "
                                "deterministic)", "n")
    if not request.user:
        raise RequestError(400, "user: name the person to write for (the request's `user` field)", "user")
    return request.user


def completion(served: str, text: str) -> dict:
    return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": served, "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                                          "message": {"role": "assistant", "content": text}}]}


def build_app(deployment, served: str) -> FastAPI:
    """The endpoint for one deployment (a RunDeployment or anything with `generate(user, prompts)`)."""
    app = FastAPI(title=f"persalign: {served}", docs_url=None, redoc_url=None)
    turn = threading.Lock()  # one generation at a time: the models and their caches are shared

    @app.exception_handler(RequestError)
    async def refused(_: Request, error: RequestError):
        kind = "invalid_request_error" if error.status < 500 else "server_error"
        return JSONResponse(error_body(error.message, kind, error.param, error.code), status_code=error.status)

    @app.exception_handler(RequestValidationError)
    async def malformed(_: Request, error: RequestValidationError):
        first = error.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())[1:]) or "body"
        return JSONResponse(error_body(f"{where}: {first.get('msg', 'invalid')}", "invalid_request_error", where),
                            status_code=400)

    @app.exception_handler(Exception)
    async def failed(_: Request, error: Exception):
        return JSONResponse(error_body(f"internal error: {type(error).__name__}: {str(error)[:200]}",
                                       "server_error"), status_code=500)

    @app.get("/v1/models")
    def models() -> dict:
        return {"object": "list", "data": [{"id": served, "object": "model", "created": 0, "owned_by": "persalign"}]}

    @app.post("/v1/chat/completions")
    def chat(request: ChatRequest) -> dict:
        user, prompt = check_request(request, served), prompt_of(request)
        with turn:
            try:
                (text,) = deployment.generate(user, [prompt])
            except PersalignError as error:  # an unknown user, a prompt Best-of-N cannot answer
                raise RequestError(400, str(error)) from error
        return completion(served, text)

    return app


def server(deployment, served: str, host: str = "127.0.0.1", port: int = 8000):
    """The uvicorn server of the endpoint; `.run()` serves until interrupted (`.run(sockets=[...])`: on sockets
    already bound, e.g. a test's free port)."""
    import uvicorn

    return uvicorn.Server(uvicorn.Config(build_app(deployment, served), host=host, port=port, log_level="warning"))


def serve(deployment, served: str, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve until interrupted (Ctrl-C)."""
    server(deployment, served, host, port).run()
