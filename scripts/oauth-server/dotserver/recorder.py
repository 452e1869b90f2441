"""A record of every request the server answered, for the tests to count (token requests per
grant, client authentication used), kept in memory and printed as one line each.

Recorded when the application has produced the response's status, before a byte of it is
written: a client that has its answer finds its request in GET /test/requests. No token,
secret, code or verifier is ever recorded or printed: only the parameter names, and the values
of `grant_type` and `token_type_hint` (RFC 7009), which name a kind, not a secret.
"""

import io
import sys
import threading
from urllib.parse import parse_qs

_lock = threading.Lock()
_records = []


def snapshot():
    with _lock:
        return list(_records)


def _client_authentication(environ, form):
    header = environ.get("HTTP_AUTHORIZATION", "")
    scheme = header.split(" ", 1)[0].lower() if header else ""
    if scheme == "basic":
        return "basic"
    if scheme == "bearer":
        return "bearer"
    if "client_secret" in form:
        return "form"
    if "client_id" in form:
        return "client_id"
    return "none"


class RecordingMiddleware:
    """WSGI middleware: reads a form body once (and hands the application a copy), records
    the request with its status, prints `DOT-REQUEST ...`."""

    def __init__(self, application):
        self.application = application

    def __call__(self, environ, start_response):
        form = {}
        if environ.get("CONTENT_TYPE", "").startswith("application/x-www-form-urlencoded"):
            length = int(environ.get("CONTENT_LENGTH") or 0)
            body = environ["wsgi.input"].read(length) if length > 0 else b""
            environ["wsgi.input"] = io.BytesIO(body)
            form = parse_qs(body.decode("latin-1"), keep_blank_values=True)
        path = environ.get("PATH_INFO", "")
        record = {
            "method": environ.get("REQUEST_METHOD", ""),
            "path": path,
            "grant_type": form.get("grant_type", [None])[0],
            # RFC 7009's hint (`refresh_token`, `access_token`): a name, never a token.
            "token_type_hint": form.get("token_type_hint", [None])[0],
            "client_authentication": _client_authentication(environ, form),
            "parameters": sorted(form.keys()),
        }

        def recording_start_response(status, headers, exc_info=None):
            record["status"] = int(status.split(" ", 1)[0])
            if not path.startswith("/test/"):
                with _lock:
                    record["sequence"] = len(_records) + 1
                    _records.append(record)
                line = (
                    "DOT-REQUEST sequence={} method={} path={} status={} grant_type={} token_type_hint={} client_authentication={}"
                ).format(
                    record["sequence"], record["method"], path, record["status"], record["grant_type"] or "-",
                    record["token_type_hint"] or "-", record["client_authentication"],
                )
                print(line, flush=True)
            return start_response(status, headers, exc_info)

        return self.application(environ, recording_start_response)
