"""What can go wrong talking to the API server, said one way for every caller of `sro.kube`.

Why one module: lightkube raises `ApiError` (a refusal with a Status), its list calls let
`httpx.HTTPStatusError` through as they are, and a connection fails with `httpx.HTTPError` or
`OSError`. Every client in kube/ catches the same `Errors`, reads the HTTP code with `status_code`
and says the problem in one line with `describe_error`, so callers above kube/ never import
lightkube or httpx to handle an error.
"""

from __future__ import annotations

import httpx
from lightkube import ApiError
from lightkube.core.exceptions import ConfigError

HINT = 'give --kubeconfig FILE or set $KUBECONFIG (the local cluster: eval "$(sro local env)")'
Errors = (ApiError, httpx.HTTPError, OSError)


class KubeError(RuntimeError):
    """The API server refused or could not be reached; the message names the object."""


def status_code(e: BaseException) -> int:
    """The HTTP code of a refusal (0: no answer at all)."""
    if isinstance(e, httpx.HTTPStatusError):  # lightkube's list raises these as they are
        return e.response.status_code
    return int(getattr(getattr(e, "status", None), "code", 0) or 0)


def kind_missing(e: BaseException) -> bool:
    """A 404 whose body is not about one object: the resource type itself is not served."""
    if status_code(e) != 404:
        return False
    if isinstance(e, ApiError):
        return not (e.status.details and e.status.details.name)
    return True


def refused_for_good(e: BaseException) -> bool:
    """A refusal that asking again will not mend: the request itself was judged (invalid, forbidden,
    denied by admission). Not a gone object (404), a timeout (408), a conflict (409: read again and
    re-plan), throttling (429), a server's failure (5xx) or no answer at all."""
    code = status_code(e)
    return 400 <= code < 500 and code not in (404, 408, 409, 429)


def refusal(e: BaseException) -> str:
    """`409 Conflict: the object has been modified` for a refusal, else the error's type and words."""
    if isinstance(e, ApiError):
        return f"{e.status.code} {e.status.reason or ''}: {e.status.message or ''}".strip()
    if isinstance(e, httpx.HTTPStatusError):
        resp = e.response
        return f"{resp.status_code} {resp.reason_phrase}: {_status_message(resp)}".strip().rstrip(":")
    return f"{type(e).__name__}: {e}"


def _status_message(resp: httpx.Response) -> str:
    """The message of the Status object the API server answers a refusal with ("" when none)."""
    try:
        body = resp.json()
    except (ValueError, httpx.ResponseNotRead):
        return ""
    return str(body.get("message") or "") if isinstance(body, dict) else ""


def api_message(e: BaseException) -> str | None:
    """The API server's own words of a refusal, or None for any other error."""
    if isinstance(e, ApiError):
        return str(e.status.message)
    return None


def describe_error(e: BaseException) -> str | None:
    """One line for an error of the API (config, connection, refusal), or None for any other error."""
    if isinstance(e, ConfigError):
        return f"kubeconfig: {one_line(e)}; {HINT}"
    if isinstance(e, ApiError):
        status = e.status
        return f"the API server refused: {status.code} {status.reason or ''}: {status.message or ''}"
    if isinstance(e, httpx.HTTPStatusError):
        return f"{e.request.url}: {refusal(e)}"
    if isinstance(e, httpx.HTTPError):
        try:
            url = e.request.url
            where = f"{url.scheme}://{url.host}:{url.port or ''}"
        except RuntimeError:  # no request attached
            where = "(unknown)"
        why = one_line(e) or type(e).__name__
        return f"API server {where} unreachable ({why}); is the cluster up? (--kubeconfig, $KUBECONFIG)"
    return None


def one_line(e: BaseException) -> str:
    return " ".join(str(e).split())
