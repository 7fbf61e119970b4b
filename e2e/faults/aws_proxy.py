"""An HTTP proxy in front of moto that answers as a struggling AWS would: throttling, 500s,
slow responses, and IAM's eventual consistency.

moto 5.2 has no way of its own to do this: its state manager only delays status transitions
of a few services (Athena, DAX, DMS, ECS, Glue...; ``moto/moto_api/__init__.py``), and its other
``/moto-api`` switches set canned results, seeds and the recorder. So provider-aws's
ProviderConfig points at this proxy (``endpoint.url.static``), which forwards every request
byte for byte (method, path, headers, body; ``Host`` as the client signed it) to moto and
sends moto's answer back, unless a ``Rule`` says otherwise:

- ``throttle``: the service's own throttling error, as each protocol spells it: IAM, STS
  (AWS query): 400 ``Throttling``; EC2 (its query dialect): 503 ``RequestLimitExceeded``;
  S3 (REST-XML): 503 ``SlowDown``; CloudFront, Route 53 (REST-XML): 400 ``Throttling``.
  The AWS SDKs retry these, backing off (Go v2: ``retry.IsErrorThrottle`` codes);
- ``server-error``: 500 ``InternalFailure`` (EC2 and S3: ``InternalError``), retried too;
- ``slow``: the request is forwarded after ``delay_s``;
- ``eventual-consistency``: for ``window_s`` after moto created a role or a policy (while
  such a rule holds), IAM
  does not yet know it everywhere: attaching a policy to that role, or that policy to a role,
  gets 404 ``NoSuchEntity``, and STS refuses to assume the role (403 ``AccessDenied``), while
  ``GetRole`` already finds it. What AWS documents ("Changes that I make are not always
  immediately visible", IAM user guide, troubleshooting).

A rule applies to the services and actions it names (all when empty: the query API's
``Action``, or the REST method), to every ``every``-th request it matches. Every injected
fault is recorded (``injected``), so a test can show the fault was met.
"""

from __future__ import annotations

import http.client
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

THROTTLE, SERVER_ERROR, SLOW, EVENTUAL_CONSISTENCY = "throttle", "server-error", "slow", "eventual-consistency"
KINDS = (THROTTLE, SERVER_ERROR, SLOW, EVENTUAL_CONSISTENCY)
# Hop-by-hop headers (RFC 9110 7.6.1) are not forwarded; the body is sent with its length.
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade"})
IAM_XMLNS = "https://iam.amazonaws.com/doc/2010-05-08/"
# Calls that need IAM to know a role (by RoleName) or a policy (by PolicyArn) everywhere.
ATTACH_ACTIONS = frozenset({"AttachRolePolicy", "PutRolePolicy"})
ASSUME_ACTIONS = frozenset({"AssumeRole", "AssumeRoleWithWebIdentity"})
REST_XML_WITH_WRAPPER = frozenset({"cloudfront", "route53"})


@dataclass(frozen=True)
class Rule:
    """One way of answering badly."""

    kind: str
    services: frozenset[str] = frozenset()  # empty: every service
    actions: frozenset[str] = frozenset()  # empty: every action (query Action or REST method)
    every: int = 1  # the n-th, 2n-th... matching request (1: each one)
    delay_s: float = 0.0  # slow
    window_s: float = 5.0  # eventual-consistency

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            msg = f"kind {self.kind!r}: one of {', '.join(KINDS)}"
            raise ValueError(msg)
        if self.every < 1:
            msg = f"every {self.every}: at least 1"
            raise ValueError(msg)

    def matches(self, service: str, action: str) -> bool:
        return (not self.services or service in self.services) and (not self.actions or action in self.actions)


@dataclass(frozen=True)
class Request:
    """What the proxy reads of one request to tell the service and the action."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def service(self) -> str:
        """The signing name of SigV4's credential scope (``.../<region>/<service>/aws4_request``)."""
        auth = self.headers.get("authorization", "")
        if "Credential=" not in auth:
            return "anonymous"
        scope = auth.split("Credential=", 1)[1].split(",", 1)[0].split("/")
        return scope[3] if len(scope) > 3 else "?"

    @property
    def params(self) -> dict[str, str]:
        """The query's and, for a form body, the body's parameters (first value of each)."""
        query = urlsplit(self.path).query
        out = {k: v[0] for k, v in parse_qs(query, keep_blank_values=True).items()}
        if "x-www-form-urlencoded" in self.headers.get("content-type", ""):
            out.update({k: v[0] for k, v in parse_qs(self.body.decode(errors="replace"), keep_blank_values=True).items()})
        return out

    @property
    def action(self) -> str:
        """The query API's ``Action``, else the REST method."""
        return self.params.get("Action") or self.method


@dataclass(frozen=True)
class Injected:
    """A fault the proxy answered with (or a delay it added)."""

    at: float
    kind: str
    service: str
    action: str
    status: int  # the HTTP status answered; 0 for a delay (moto's answer followed)
    code: str


def error_body(service: str, code: str, message: str) -> tuple[str, bytes]:
    """(content type, body) of an AWS error in ``service``'s protocol."""
    request_id = str(uuid.uuid4())
    if service == "ec2":
        xml = f"<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error></Errors><RequestID>{request_id}</RequestID></Response>"
    elif service == "s3":
        xml = f"<Error><Code>{code}</Code><Message>{message}</Message><RequestId>{request_id}</RequestId></Error>"
    else:  # the AWS query protocol (IAM, STS), and CloudFront's and Route 53's REST-XML
        xmlns = f' xmlns="{IAM_XMLNS}"' if service == "iam" else ""
        kind = "Receiver" if code in {"InternalFailure", "ServiceFailure"} else "Sender"
        xml = (
            f"<ErrorResponse{xmlns}><Error><Type>{kind}</Type><Code>{code}</Code><Message>{message}</Message></Error>"
            f"<RequestId>{request_id}</RequestId></ErrorResponse>"
        )
    return "text/xml", ('<?xml version="1.0" encoding="UTF-8"?>\n' + xml).encode()


def throttling(service: str) -> tuple[int, str, str]:
    """(status, code, message) of ``service``'s throttling error."""
    if service == "ec2":
        return 503, "RequestLimitExceeded", "Request limit exceeded."
    if service == "s3":
        return 503, "SlowDown", "Please reduce your request rate."
    return 400, "Throttling", "Rate exceeded"


def server_error(service: str) -> tuple[int, str, str]:
    """(status, code, message) of an internal error of ``service``."""
    if service in {"ec2", "s3"}:
        return 500, "InternalError", "We encountered an internal error. Please try again."
    return 500, "InternalFailure", "The request processing has failed because of an unknown error, exception or failure."


@dataclass
class _Fresh:
    """Roles (by name) and policies (by ARN) moto created, and when."""

    roles: dict[str, float] = field(default_factory=dict)
    policies: dict[str, float] = field(default_factory=dict)


class FaultProxy:
    """The proxy on 127.0.0.1 (a port of its own), forwarding to ``upstream`` (moto's endpoint)."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.rules: tuple[Rule, ...] = ()
        self.injected: list[Injected] = []
        self.forwarded = 0
        self._counts: dict[int, int] = {}
        self._fresh = _Fresh()
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the SDKs' clients expect

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
                pass

            def _handle(self) -> None:
                proxy._handle(self)

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = do_PATCH = do_OPTIONS = _handle  # noqa: N815

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    # --- what it does ---------------------------------------------------------------------

    def set(self, *rules: Rule) -> None:
        """Answer by these rules from now on (in place of any before)."""
        with self._lock:
            self.rules = tuple(rules)
            self._counts = {}

    def clear(self) -> None:
        """Forward everything as it is."""
        self.set()

    def faults(self, kinds: Iterable[str] | None = None, since: float = 0.0) -> list[Injected]:
        """The faults injected since ``since`` (monotonic), of ``kinds`` (all when None)."""
        wanted = set(kinds) if kinds is not None else set(KINDS)
        with self._lock:
            return [i for i in self.injected if i.kind in wanted and i.at >= since]

    # --- one request ----------------------------------------------------------------------

    def _read(self, handler: BaseHTTPRequestHandler) -> Request:
        headers = {k.lower(): v for k, v in handler.headers.items()}
        if "chunked" in headers.get("transfer-encoding", "").lower():
            body = b""
            while True:
                size = int(handler.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while handler.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    break
                body += handler.rfile.read(size)
                handler.rfile.readline()
        else:
            body = handler.rfile.read(int(headers.get("content-length", "0") or 0))
        return Request(handler.command, handler.path, headers, body)

    def _decide(self, req: Request) -> tuple[Rule | None, tuple[int, str, str] | None]:
        """The rule that applies and the error to answer with (None: forward)."""
        service, action = req.service, req.action
        with self._lock:
            for i, rule in enumerate(self.rules):
                if not rule.matches(service, action):
                    continue
                if rule.kind == EVENTUAL_CONSISTENCY:
                    refused = self._not_yet_consistent(req, rule.window_s)
                    if refused is not None:
                        return rule, refused
                    continue
                self._counts[i] = self._counts.get(i, 0) + 1
                if self._counts[i] % rule.every:
                    continue
                if rule.kind == THROTTLE:
                    return rule, throttling(service)
                if rule.kind == SERVER_ERROR:
                    return rule, server_error(service)
                return rule, None  # slow
        return None, None

    def _not_yet_consistent(self, req: Request, window_s: float) -> tuple[int, str, str] | None:
        params, now = req.params, time.monotonic()
        if req.service == "iam" and req.action in ATTACH_ACTIONS:
            role = params.get("RoleName", "")
            if now - self._fresh.roles.get(role, -1e9) < window_s:
                return 404, "NoSuchEntity", f"The role with name {role} cannot be found."
            policy = params.get("PolicyArn", "")
            if now - self._fresh.policies.get(policy, -1e9) < window_s:
                return 404, "NoSuchEntity", f"Policy {policy} does not exist or is not attachable."
        if req.service == "sts" and req.action in ASSUME_ACTIONS:
            role = params.get("RoleArn", "").rsplit("/", 1)[-1]
            if now - self._fresh.roles.get(role, -1e9) < window_s:
                return 403, "AccessDenied", f"Not authorized to perform sts:{req.action}"
        return None

    def _remember(self, req: Request, status: int, body: bytes) -> None:
        """A role or policy moto just created while IAM is eventually consistent: fresh from now."""
        if req.service != "iam" or status != 200 or not any(r.kind == EVENTUAL_CONSISTENCY for r in self.rules):
            return
        if req.action == "CreateRole":
            with self._lock:
                self._fresh.roles[req.params.get("RoleName", "")] = time.monotonic()
        elif req.action == "CreatePolicy":
            text = body.decode(errors="replace")
            if "<Arn>" in text:
                arn = text.split("<Arn>", 1)[1].split("</Arn>", 1)[0]
                with self._lock:
                    self._fresh.policies[arn] = time.monotonic()

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        req = self._read(handler)
        rule, refused = self._decide(req)
        if rule is not None:
            status, code = refused[:2] if refused else (0, f"+{rule.delay_s:g}s")
            with self._lock:
                self.injected.append(Injected(time.monotonic(), rule.kind, req.service, req.action, status, code))
        if refused is not None:
            status, code, message = refused
            content_type, body = error_body(req.service, code, message)
            self._answer(handler, status, [("Content-Type", content_type)], body)
            return
        if rule is not None and rule.delay_s:
            time.sleep(rule.delay_s)
        status, headers, body = self._forward(req)
        self._remember(req, status, body)
        self._answer(handler, status, headers, body, head=req.method == "HEAD")

    def _forward(self, req: Request) -> tuple[int, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(*self.upstream, timeout=120)
        try:
            headers = {k: v for k, v in req.headers.items() if k not in HOP_BY_HOP}
            if req.body or req.method in {"PUT", "POST", "PATCH"}:
                headers["content-length"] = str(len(req.body))
            conn.request(req.method, req.path, body=req.body or None, headers=headers)
            rsp = conn.getresponse()
            body = rsp.read()
            kept = [(k, v) for k, v in rsp.getheaders() if k.lower() not in HOP_BY_HOP]
        finally:
            conn.close()
        with self._lock:
            self.forwarded += 1
        return rsp.status, kept, body

    @staticmethod
    def _answer(
        handler: BaseHTTPRequestHandler, status: int, headers: list[tuple[str, str]], body: bytes, *, head: bool = False
    ) -> None:
        handler.send_response_only(status)
        length_sent = False
        for key, value in headers:
            if key.lower() == "content-length":
                if head:  # a HEAD answer keeps the entity's length
                    handler.send_header(key, value)
                    length_sent = True
                continue
            handler.send_header(key, value)
        if not length_sent:
            handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        if not head:
            handler.wfile.write(body)
