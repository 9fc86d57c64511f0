"""The errors of the broker client (:class:`BrokerClient`), and how a remoting error
becomes one."""

from __future__ import annotations

from hanet.protocol import ResponseCode

from ._remoting import (
    RemotingConnectionError,
    RemotingError,
    RemotingProtocolError,
    RemotingTimeoutError,
)

__all__ = [
    "BrokerConnectionError",
    "BrokerError",
    "BrokerProtocolError",
    "BrokerRequestError",
    "BrokerTimeoutError",
    "InvalidMessageError",
    "broker_error",
]


class BrokerError(RemotingError):
    """Base of the errors :class:`BrokerClient` raises (a :class:`RemotingError`: one
    ``except RemotingError`` catches the broker client's and the name server client's)."""


class BrokerConnectionError(BrokerError, RemotingConnectionError):
    """Could not connect, or the connection closed before the answer came."""


class BrokerTimeoutError(BrokerError, RemotingTimeoutError):
    """No answer within the request timeout (the request may still take effect)."""


class BrokerProtocolError(BrokerError, RemotingProtocolError):
    """The broker sent something that is not a valid answer (a malformed frame closes the
    connection)."""


class InvalidMessageError(BrokerError, ValueError):
    """A message that no broker accepts (bad topic, queue id, tags, keys or properties);
    raised before anything is sent."""


class BrokerRequestError(BrokerError):
    """The broker answered a code that says it could not serve this request.

    Attributes:
        code: the answer's code: a :class:`~hanet.protocol.ResponseCode` when RocketMQ knows
            it (SERVICE_NOT_AVAILABLE: a slave or a DLedger follower refusing a put;
            TOPIC_NOT_EXIST; REQUEST_CODE_NOT_SUPPORTED: a port that does not serve it), else
            the int.
        message: the answer's remark.
        leader_address: with a DLedger follower's refusal, the leader's broker port
            (``host:port``) when it is known, else None.
    """

    def __init__(
        self, code: int, message: str, leader_address: str | None = None, *, what: str = ""
    ) -> None:
        self.code: ResponseCode | int = _response_code(code)
        name = self.code.name if isinstance(self.code, ResponseCode) else str(code)
        text = f"{what + ': ' if what else ''}{name}: {message.strip() or 'no reason given'}"
        if leader_address:
            text += f" (leader {leader_address})"
        super().__init__(text)
        self.message = message
        self.leader_address = leader_address


def _response_code(code: int) -> ResponseCode | int:
    try:
        return ResponseCode(code)
    except ValueError:
        return code


_REMOTING_ERRORS: tuple[tuple[type[RemotingError], type[BrokerError]], ...] = (
    (RemotingConnectionError, BrokerConnectionError),
    (RemotingTimeoutError, BrokerTimeoutError),
    (RemotingProtocolError, BrokerProtocolError),
)


def broker_error(exc: RemotingError) -> BrokerError:
    """``exc`` as the broker client's error of the same kind."""
    for remoting, broker in _REMOTING_ERRORS:
        if isinstance(exc, remoting):
            return broker(str(exc))
    return BrokerError(str(exc))
