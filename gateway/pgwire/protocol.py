"""The server side of the PostgreSQL v3 protocol as a state machine without I/O: bytes go in
(``receive_data``), events come out, and the backend bytes it owes are queued for the shell to
write (``data_to_send``). The shell runs each statement event and answers through its methods.

Answers the core expects, by event: StartTLS → ``tls_started()``; Authenticated →
``session_started(...)``; a statement event (Query, Parse, Bind, Describe, Execute, Close,
Sync, Flush) → ``done()`` once handled, after ``ready(...)`` for a Query or Sync; in between,
the shell queues its result messages with ``send`` and reports errors with ``fail``.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from gateway.pgwire import auth
from gateway.pgwire import messages as M
from gateway.pgwire.errors import InvalidAuthorization, PgError, ProtocolViolation, QueryCanceled


class State(enum.Enum):
    STARTUP = "startup"                    # before the StartupMessage: SSL, GSSENC, cancel
    TLS = "starting TLS"                   # 'S' answered: the shell wraps the socket
    AUTHENTICATING = "authenticating"
    AUTHENTICATED = "authenticated"        # the shell opens the session
    READY = "ready"                        # idle: waiting for the client's next message
    IN_QUERY = "in a query"                # a message is with the shell
    COPY_IN = "COPY IN"                    # collecting CopyData for the shell's COPY FROM
    COPY_OUT = "COPY OUT"                  # the shell sends CopyData
    DISCARD = "error: discard until Sync"
    CLOSED = "closed"


# --------------------------------------------------------------------------- events
# Besides these, the frontend messages the shell acts on are events themselves: CancelRequest,
# Query, Parse, Bind, Describe, Execute, Close, Sync, Flush and Terminate.
@dataclass(frozen=True)
class StartTLS:
    """'S' is queued: send it, wrap the connection in TLS, then call ``tls_started()``."""


@dataclass(frozen=True)
class Authenticated:
    """The client proved who it is: open its session and call ``session_started(...)``."""
    user: str
    params: dict


@dataclass(frozen=True)
class CopyInDone:
    data: bytes


@dataclass(frozen=True)
class CopyInFailed:
    """The client gave up (CopyFail) or broke the COPY sub-protocol; raise ``error``."""
    error: PgError


@dataclass(frozen=True)
class Fatal:
    """A FATAL ErrorResponse is queued and the core is closed: send it and hang up."""
    error: PgError


class ProtocolStateError(Exception):
    """The shell called the core out of turn (a bug in the shell, not the client's doing)."""


@dataclass
class ServerProtocol:
    auth_method: str = "trust"
    roles: auth.RoleCatalog | None = None  # who may log in, with what secret; None: nobody
    tls_available: bool = False            # a certificate is configured
    tls: bool = False                      # the connection is encrypted
    require_tls: bool = False
    max_message: int = 64 * 1024 * 1024

    def __post_init__(self):
        self.state = State.STARTUP
        self.user: str | None = None
        self.params: dict = {}
        self._parser = M.FrontendParser(max_message=self.max_message)
        # what is to be sent, in the pieces it was given: a big encoded batch goes to the
        # socket as it is, not copied into one growing buffer first
        self._out: list = []
        self._buffered = 0
        self._auth: auth.Exchange | None = None
        self._current = None               # the message with the shell
        self._ready_sent = False
        self._failed = False               # the current extended-protocol message failed
        self._copy: list = []

    # ------------------------------------------------------------------ bytes in, events out
    def receive_data(self, data: bytes) -> list:
        """Takes bytes from the client; returns the events they make, as ``events()``."""
        self._parser.push(data)
        return self.events()

    def events(self) -> list:
        """Events from the messages received so far. Stops after one that waits for the
        shell's answer: what follows is read in the state that answer leaves."""
        out = []
        while self.state in _READERS:
            try:
                msg = self._parser.next_message()
                if msg is None:
                    break
                event = _READERS[self.state](self, msg)
            except PgError as e:
                out.append(self.fatal(e))
                break
            if event is not None:
                out.append(event)
        return out

    # ------------------------------------------------------------------ bytes out
    def send(self, data: bytes) -> None:
        if data:
            self._out.append(data)
            self._buffered += len(data)

    def data_to_send(self) -> bytes:
        out, self._out, self._buffered = self._out, [], 0
        return out[0] if len(out) == 1 else b"".join(out)

    @property
    def buffered(self) -> int:
        return self._buffered

    # ------------------------------------------------------------------ startup phase
    def _startup_message(self, msg):
        return _STARTUP[type(msg)](self, msg)

    def _on_ssl_request(self, msg: M.SSLRequest):
        if self.tls_available and not self.tls:
            self.send(b"S")
            self.state = State.TLS
            return StartTLS()
        self.send(b"N")
        return None

    def _on_gssenc_request(self, msg: M.GSSENCRequest):
        self.send(b"N")
        return None

    def _on_cancel_request(self, msg: M.CancelRequest):
        self.state = State.CLOSED            # a cancel connection carries nothing else
        return msg

    def _on_startup(self, msg: M.Startup):
        user = msg.params.get("user")
        if not user:
            raise InvalidAuthorization("no PostgreSQL user name specified in startup packet")
        if self.require_tls and not self.tls:
            raise InvalidAuthorization("this server accepts only TLS connections",
                                       hint="Connect with sslmode=require.")
        self.user, self.params = user, msg.params
        self._auth = auth.exchange(self.auth_method, user, self.roles)
        self.state = State.AUTHENTICATING
        return self._auth_step(None)

    def _auth_step(self, msg):
        try:
            challenge = self._auth.send(msg)
        except StopIteration as finished:
            if finished.value:
                self.send(finished.value)
            self._auth = None
            self.state = State.AUTHENTICATED
            return Authenticated(self.user, self.params)
        self.send(challenge)
        return None

    def tls_started(self) -> None:
        self._expect(State.TLS)
        self.tls = True
        self.state = State.STARTUP

    def session_started(self, pid: int, secret: int, parameters) -> None:
        """AuthenticationOk, the ``(name, value)`` parameters, BackendKeyData and the first
        ReadyForQuery: the session is open."""
        self._expect(State.AUTHENTICATED)
        self.send(M.authentication_ok())
        for name, value in parameters:
            self.send(M.parameter_status(name, value))
        self.send(M.backend_key_data(pid, secret))
        self.send(M.ready_for_query("I"))
        self.state = State.READY

    # ------------------------------------------------------------------ session phase
    def _session_message(self, msg):
        action = _SESSION.get(type(msg))
        if action is None:
            raise ProtocolViolation(f"unexpected message {type(msg).__name__}")
        return action(self, msg)

    def _discarding_message(self, msg):
        """After an extended-protocol error: Sync ends the discarding, and so does a simple
        Query (run, not dropped), so that a client which never sends Sync is not stuck."""
        if type(msg) not in _SESSION:
            raise ProtocolViolation(f"unexpected message {type(msg).__name__}")
        return _DISCARDING.get(type(msg), _ignore)(self, msg)

    def _begin(self, msg):
        self._current = msg
        self._ready_sent = False
        self._failed = False
        self.state = State.IN_QUERY
        return msg

    def _terminate(self, msg: M.Terminate):
        self.state = State.CLOSED
        return msg

    def done(self) -> None:
        """The shell has finished with the current message."""
        if self._current is None:
            raise ProtocolStateError("no message is being handled")
        if self.state is not State.CLOSED:
            self.state = State.DISCARD if self._failed else State.READY
        self._current = None

    def ready(self, status: str) -> None:
        """ReadyForQuery with transaction status ``status`` (I, T, E): exactly one per Query
        or Sync."""
        if not self.ready_owed:
            raise ProtocolStateError("ReadyForQuery answers a Query or a Sync, once")
        self._ready_sent = True
        self.send(M.ready_for_query(status))

    @property
    def ready_owed(self) -> bool:
        return isinstance(self._current, (M.Query, M.Sync)) and not self._ready_sent

    def fail(self, e: PgError) -> None:
        """ErrorResponse for the current message; after an extended-protocol message the core
        discards what follows until Sync."""
        self.send(M.error_response(e.sqlstate, e.message, position=e.position,
                                   detail=e.detail, hint=e.hint))
        if self.state in (State.COPY_IN, State.COPY_OUT):
            self.state = State.IN_QUERY
        if not isinstance(self._current, M.Query):
            self._failed = True

    def fatal(self, e: PgError) -> Fatal:
        """A FATAL ErrorResponse, and nothing more is read."""
        self.send(M.error_response(e.sqlstate, e.message, severity="FATAL", detail=e.detail,
                                   hint=e.hint))
        self.state = State.CLOSED
        return Fatal(e)

    def end_execute(self, tag: str, *, max_rows: int, more: bool) -> None:
        """The end of an Execute's rows: PortalSuspended when it stopped at its row limit
        with rows left (the portal goes on at the next Execute), else CommandComplete."""
        if max_rows > 0 and more:
            if not isinstance(self._current, M.Execute):
                raise ProtocolStateError("only an Execute can suspend its portal")
            self.send(M.portal_suspended())
        else:
            self.send(M.command_complete(tag))

    # ------------------------------------------------------------------ COPY
    def start_copy_in(self, ncols: int, binary: bool = False) -> None:
        """CopyInResponse; CopyData is collected until CopyDone (→ CopyInDone) or CopyFail
        (→ CopyInFailed). Flush and Sync inside COPY are ignored, as PostgreSQL does."""
        self._expect(State.IN_QUERY)
        self.send(M.copy_in_response(ncols, binary))
        self._copy = []
        self.state = State.COPY_IN

    def _copy_in_message(self, msg):
        return _COPY_IN.get(type(msg), _copy_unexpected)(self, msg)

    def _copy_data(self, msg: M.CopyData):
        self._copy.append(msg.data)
        return None

    def _copy_done(self, msg: M.CopyDone):
        data, self._copy = b"".join(self._copy), []
        self.state = State.IN_QUERY
        return CopyInDone(data)

    def _copy_fail(self, msg: M.CopyFail):
        return self._copy_failed(QueryCanceled(f"COPY from stdin failed: {msg.message}"))

    def _copy_failed(self, error: PgError):
        self._copy = []
        self.state = State.IN_QUERY
        return CopyInFailed(error)

    def start_copy_out(self, ncols: int, binary: bool = False) -> None:
        self._expect(State.IN_QUERY)
        self.send(M.copy_out_response(ncols, binary))
        self.state = State.COPY_OUT

    def end_copy_out(self) -> None:
        self._expect(State.COPY_OUT)
        self.send(M.copy_done())
        self.state = State.IN_QUERY

    def _expect(self, state: State) -> None:
        if self.state is not state:
            raise ProtocolStateError(f"expected state {state.value}, not {self.state.value}")


def _ignore(core: ServerProtocol, msg) -> None:
    return None


def _copy_unexpected(core: ServerProtocol, msg):
    return core._copy_failed(ProtocolViolation("unexpected message type during COPY from stdin"))


# What each state does with the next message; states not listed wait for the shell.
_READERS = {
    State.STARTUP: ServerProtocol._startup_message,
    State.AUTHENTICATING: ServerProtocol._auth_step,
    State.READY: ServerProtocol._session_message,
    State.DISCARD: ServerProtocol._discarding_message,
    State.COPY_IN: ServerProtocol._copy_in_message,
}

_STARTUP = {
    M.SSLRequest: ServerProtocol._on_ssl_request,
    M.GSSENCRequest: ServerProtocol._on_gssenc_request,
    M.CancelRequest: ServerProtocol._on_cancel_request,
    M.Startup: ServerProtocol._on_startup,
}

_SESSION = {
    **dict.fromkeys((M.Query, M.Parse, M.Bind, M.Describe, M.Execute, M.Close, M.Sync, M.Flush),
                    ServerProtocol._begin),
    M.Terminate: ServerProtocol._terminate,
    # COPY messages outside COPY: the protocol says to accept and ignore them
    **dict.fromkeys((M.CopyData, M.CopyDone, M.CopyFail), _ignore),
}

_DISCARDING = {M.Query: ServerProtocol._begin, M.Sync: ServerProtocol._begin,
               M.Terminate: ServerProtocol._terminate}

_COPY_IN = {
    M.CopyData: ServerProtocol._copy_data,
    M.CopyDone: ServerProtocol._copy_done,
    M.CopyFail: ServerProtocol._copy_fail,
    M.Flush: _ignore,
    M.Sync: _ignore,
}
