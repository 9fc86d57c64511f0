"""RocketMQ 4.9.8's ``PlainAccessValidator``, sans-IO: is this request, from this address,
allowed by this ``plain_acl.yml``?

In order, as 4.9.8 checks:

1. a peer matching a ``globalWhiteRemoteAddresses`` pattern passes;
2. a request without ``AccessKey`` is refused ("No accessKey is configured"), one whose key
   no account has too ("No acl config for KEY");
3. a peer matching its account's ``whiteRemoteAddress`` passes (no signature checked);
4. the signature is recomputed with the account's secret key (see
   :mod:`hanet.protocol._acl`): a mismatch is refused ("Check signature failed for
   accessKey=KEY");
5. the resources the request touches (:func:`needed_resources`) are checked: admin request
   codes need an admin account; each topic and group needs the permission listed for it, else
   the account's default ("No default permission for topic:T" / "group:G"). An admin account
   that lists no topic or group permission passes.

:class:`AclGuard` is a :class:`~hanet.protocol.RemotingDispatcher` guard: it answers a refused
request NO_PERMISSION (16), the remark RocketMQ's exception text
(``org.apache.rocketmq.acl.common.AclException: ...``; RocketMQ 4.9.8 itself answers such a
refusal SYSTEM_ERROR with that text and a stack frame), a request whose header or body it
cannot read SYSTEM_ERROR with the reason, and logs refusals at WARNING at most once a minute
per address and reason.

Where hanet checks more than 4.9.8 (its table leaves these requests to the signature alone):
SEND_BATCH_MESSAGE needs PUB on its topic as a single send does, QUERY_CONSUMER_OFFSET needs
SUB on the group and the topic as UPDATE_CONSUMER_OFFSET does, LOCK/UNLOCK_BATCH_MQ need SUB on
the group; the name server (which has no ACL in 4.9.8) makes REGISTER_BROKER,
UNREGISTER_BROKER, PUT_KV_CONFIG and DELETE_KV_CONFIG admin requests
(:data:`NAMESRV_ADMIN_CODES`).
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Callable, Iterable

from hanet.channel import HandlerContext, format_address
from hanet.errors import HanetError

from ._acl import ACCESS_KEY as _ACCESS_KEY
from ._acl import SIGNATURE, UNIQUE_MSG_QUERY_FLAG, request_signature
from ._acl_config import (
    RETRY_GROUP_TOPIC_PREFIX,
    AclAccount,
    Perm,
    PlainAclConfig,
    check_permission,
)
from ._bodies import HeartbeatData, LockBatchRequestBody
from ._codes import HanetRequestCode, RequestCode, ResponseCode
from ._remoting import RemotingCommand, RemotingHeaderError

__all__ = [
    "ADMIN_CODES",
    "NAMESRV_ADMIN_CODES",
    "AclDenied",
    "AclGuard",
    "check_request",
    "needed_resources",
]

log = logging.getLogger("hanet.protocol")

ADMIN_CODES = frozenset(
    {
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        RequestCode.UPDATE_BROKER_CONFIG,
        RequestCode.DELETE_TOPIC_IN_BROKER,
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        RequestCode.DELETE_SUBSCRIPTIONGROUP,
        # hanet's additions: moving any group's offsets, and reading the whole commit log
        RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
        HanetRequestCode.HANET_READ_LOG,
    }
)
"""Request codes only an admin account may send (RocketMQ's ``Permission.ADMIN_CODE``, and
hanet's: INVOKE_BROKER_TO_RESET_OFFSET would let any account move another group's offsets,
HANET_READ_LOG hands out every message)."""

NAMESRV_ADMIN_CODES = ADMIN_CODES | {
    RequestCode.REGISTER_BROKER,
    RequestCode.UNREGISTER_BROKER,
    RequestCode.PUT_KV_CONFIG,
    RequestCode.DELETE_KV_CONFIG,
    RequestCode.DELETE_TOPIC_IN_NAMESRV,
    RequestCode.WIPE_WRITE_PERM_OF_BROKER,
    RequestCode.ADD_WRITE_PERM_OF_BROKER,
}
"""On hanet's name server: also who may register brokers, change the KV config, delete
topics from routes and take or give back a broker's write permission."""

TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
"""Sends to the message trace topic skip the permission check (RocketMQ's rule)."""

EXCEPTION = "org.apache.rocketmq.acl.common.AclException: "

_UNSIGNED = frozenset({SIGNATURE, UNIQUE_MSG_QUERY_FLAG})


class AclDenied(HanetError):
    """A refusal; the message is RocketMQ's (``No acl config for KEY``, ...)."""


def _retry(group: str | None) -> str | None:
    return None if group is None else RETRY_GROUP_TOPIC_PREFIX + group


def _field(request: RemotingCommand, name: str) -> str:
    value = request.fields.get(name)
    if value is None:
        raise RemotingHeaderError(f"the request has no {name}")
    return value


_PUB = Perm.PUB.value
_SUB = Perm.SUB.value


def needed_resources(request: RemotingCommand) -> dict[str, int]:
    """Topic (or ``%RETRY%group``) -> the permission ``request`` needs on it.

    Raises:
        RemotingHeaderError: a field or body the check needs is missing or malformed.
    """
    code = request.code
    fields = request.fields
    needed: dict[str, int] = {}

    def add(resource: str | None, perm: int) -> None:
        if resource is not None:
            needed[resource] = perm

    if code in (
        RequestCode.SEND_MESSAGE,
        RequestCode.SEND_MESSAGE_V2,
        RequestCode.SEND_BATCH_MESSAGE,
    ):
        v2 = "b" in fields or code == RequestCode.SEND_MESSAGE_V2
        topic = _field(request, "b" if v2 else "topic")
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):  # a consumer sending a message back
            add(_retry(fields.get("a" if v2 else "producerGroup")), _SUB)
        else:
            add(topic, _PUB)
    elif code == RequestCode.CONSUMER_SEND_MSG_BACK:
        add(_retry(fields.get("group")), _SUB)
    elif code == RequestCode.PULL_MESSAGE:
        add(fields.get("topic"), _SUB)
        add(_retry(fields.get("consumerGroup")), _SUB)
    elif code == RequestCode.QUERY_MESSAGE:
        add(fields.get("topic"), _SUB)
    elif code == RequestCode.HEART_BEAT:
        for consumer in HeartbeatData.from_json(request.body).consumer_data_set:
            add(_retry(consumer.group_name), _SUB)
            for subscription in consumer.subscription_data_set:
                add(subscription.topic, _SUB)
    elif code in (RequestCode.UNREGISTER_CLIENT, RequestCode.GET_CONSUMER_LIST_BY_GROUP):
        if code == RequestCode.GET_CONSUMER_LIST_BY_GROUP:
            _field(request, "consumerGroup")
        add(_retry(fields.get("consumerGroup")), _SUB)
    elif code in (RequestCode.UPDATE_CONSUMER_OFFSET, RequestCode.QUERY_CONSUMER_OFFSET):
        add(_retry(_field(request, "consumerGroup")), _SUB)
        add(_field(request, "topic"), _SUB)
    elif code in (RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ):
        add(_retry(LockBatchRequestBody.from_json(request.body).consumer_group), _SUB)
    return needed


def _describe(resource: str) -> str:
    if resource.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return "group:" + resource[len(RETRY_GROUP_TOPIC_PREFIX) :]
    return "topic:" + resource


def check_request(
    config: PlainAclConfig,
    request: RemotingCommand,
    host: str,
    *,
    admin_codes: Iterable[int] = ADMIN_CODES,
) -> AclAccount | None:
    """Check ``request`` from a peer at ``host`` (see the module); the account it was signed
    with (None: passed by the global white list).

    Raises:
        AclDenied: refused, with RocketMQ's reason.
        RemotingHeaderError: a field or body the check needs is missing or malformed.
    """
    for pattern in config.global_white:
        if pattern.matches(host):
            return None
    fields = request.fields
    access_key = fields.get(_ACCESS_KEY)
    if access_key is None:
        raise AclDenied("No accessKey is configured")
    account = config.accounts.get(access_key)
    if account is None:
        raise AclDenied(f"No acl config for {access_key}")
    if account.white_remote_address.matches(host):
        return account
    expected = request_signature(fields, request.body, account.secret_key, exclude=_UNSIGNED)
    given = fields.get(SIGNATURE, "").encode("utf-8", "surrogatepass")  # any peer string
    if not hmac.compare_digest(expected.encode(), given):
        raise AclDenied(f"Check signature failed for accessKey={access_key}")
    needed = needed_resources(request)
    if needed.get(TRACE_TOPIC) == _PUB:
        return account
    if request.code in admin_codes and not account.admin:
        raise AclDenied(
            f"Need admin permission for request code={request.code}, "
            f"but accessKey={access_key} is not"
        )
    owned = account.resource_perms
    if not needed or (owned is None and account.admin):
        return account
    for resource, perm in needed.items():
        have = owned.get(resource) if owned is not None else None
        if have is None:
            group = resource.startswith(RETRY_GROUP_TOPIC_PREFIX)
            have = account.default_group_perm if group else account.default_topic_perm
        if not check_permission(perm, have):
            raise AclDenied(f"No default permission for {_describe(resource)}")
    return account


_LOG_EVERY = 60.0


class AclGuard:
    """A :class:`~hanet.protocol.RemotingDispatcher` guard checking every request against the
    config ``current()`` returns (the file's latest).

    Args:
        current: the config now in force.
        port: the port's name in log lines.
        admin_codes: the request codes that need an admin account.
        clock: seconds, for the log's rate limit.
    """

    def __init__(
        self,
        current: Callable[[], PlainAclConfig],
        *,
        port: str = "the broker port",
        admin_codes: Iterable[int] = ADMIN_CODES,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.current = current
        self.port = port
        self.admin_codes = frozenset(int(code) for code in admin_codes)
        self.refused = 0
        """Requests refused so far."""
        self._clock = clock or time.monotonic
        self._logged: dict[tuple[str, str], float] = {}

    def __call__(self, ctx: HandlerContext, request: RemotingCommand) -> RemotingCommand | None:
        address = ctx.channel.remote_address
        host = str(address[0]) if isinstance(address, tuple) and address else ""
        try:
            check_request(self.current(), request, host, admin_codes=self.admin_codes)
        except AclDenied as exc:
            self.refused += 1
            self._log(request, format_address(address), host, str(exc))
            return request.response(ResponseCode.NO_PERMISSION, EXCEPTION + str(exc))
        except RemotingHeaderError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
        return None

    def _log(self, request: RemotingCommand, peer: str, host: str, reason: str) -> None:
        key = (host, reason)
        now = self._clock()
        last = self._logged.get(key)
        if last is not None and now - last < _LOG_EVERY:
            log.debug("%s: ACL refused %s from %s: %s", self.port, request.describe(), peer, reason)
            return
        if len(self._logged) > 10_000:  # bounded: forget the oldest half
            for old in sorted(self._logged, key=self._logged.__getitem__)[:5_000]:
                del self._logged[old]
        self._logged[key] = now
        log.warning(
            "%s: ACL refused %s from %s: %s (the same again from this address within a minute "
            "is logged at DEBUG)",
            self.port,
            request.describe(),
            peer,
            reason,
        )
