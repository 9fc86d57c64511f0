"""RocketMQ 4.9.8's ``plain_acl.yml``: accounts, permissions and address patterns.

The file (read with :func:`~hanet.protocol.parse_yaml`, the YAML subset it is written in)::

    globalWhiteRemoteAddresses:       # requests from these addresses pass unchecked
      - 10.10.103.*
    accounts:
      - accessKey: RocketMQ           # more than 6 characters
        secretKey: 12345678           # more than 6 characters
        whiteRemoteAddress:           # requests of this account from here pass unchecked
        admin: false                  # admin requests (create/delete topics and groups)
        defaultTopicPerm: DENY        # topics not listed (missing: DENY)
        defaultGroupPerm: SUB         # groups not listed (missing: DENY)
        topicPerms: [topicA=DENY, topicB=PUB|SUB]
        groupPerms: [groupA=SUB]      # PUB, SUB, PUB|SUB (SUB|PUB) or DENY

Address patterns, as RocketMQ's ``RemoteAddressStrategyFactory``: empty (nothing), ``*``
(everything; also ``*.*.*.*``), one address (``192.168.1.10``, ``::1``), a list
(``192.168.1.1,192.168.1.2``), a last part in braces (``192.168.0.{100,101}``), a range in
one part followed only by ``*`` parts (``192.168.1.100-200``, ``192.168.*.*``, IPv6
``1050::5:600:300c:*``). CIDR (``10.0.0.0/8``) is not a 4.9.8 pattern and is refused.

hanet refuses what 4.9.8 would take silently: a permission that is not one of the five
(RocketMQ reads it as DENY), a range followed by a fixed part (``192.168.*.5``: RocketMQ
ignores the ``5``), a duplicate access key. A file that does not load is a
:class:`AclConfigError` naming the file and the line or account.

:class:`PlainAclFile` keeps a file's current config and reloads it when the file changes
(:meth:`~PlainAclFile.poll`; the services call it every second); a change that does not load
is logged at ERROR and the previous config stays.
"""

from __future__ import annotations

import enum
import functools
import ipaddress
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from hanet.errors import ConfigError

from ._yaml_subset import YamlSubsetError, parse_yaml

__all__ = [
    "RETRY_GROUP_TOPIC_PREFIX",
    "AclAccount",
    "AclConfigError",
    "AddressPattern",
    "Perm",
    "PlainAclConfig",
    "PlainAclFile",
]

log = logging.getLogger("hanet.protocol")

RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
"""A group's permission is kept under its retry topic's name, as RocketMQ does."""

ACCESS_KEY_MIN_LENGTH = 6
SECRET_KEY_MIN_LENGTH = 6

_ACCOUNT_KEYS = frozenset(
    {
        "accessKey",
        "secretKey",
        "whiteRemoteAddress",
        "admin",
        "defaultTopicPerm",
        "defaultGroupPerm",
        "topicPerms",
        "groupPerms",
    }
)
_TOP_KEYS = frozenset({"globalWhiteRemoteAddresses", "accounts", "dataVersion"})


class AclConfigError(ConfigError):
    """A ``plain_acl.yml`` that does not load: names the file and the line or account."""


class Perm(enum.IntFlag):
    """RocketMQ's permission bits (``Permission``)."""

    DENY = 1
    ANY = 2
    PUB = 4
    SUB = 8


_PERMS = {
    "PUB": Perm.PUB,
    "SUB": Perm.SUB,
    "PUB|SUB": Perm.PUB | Perm.SUB,
    "SUB|PUB": Perm.PUB | Perm.SUB,
    "DENY": Perm.DENY,
}


def parse_perm(text: str | None) -> Perm:
    """``PUB``, ``SUB``, ``PUB|SUB``, ``SUB|PUB`` or ``DENY``; a missing one is DENY.

    Raises:
        ValueError: anything else.
    """
    if text is None:
        return Perm.DENY
    perm = _PERMS.get(text.strip())
    if perm is None:
        raise ValueError(f"permission {text!r} is not PUB, SUB, PUB|SUB, SUB|PUB or DENY")
    return perm


def check_permission(needed: int, owned: int) -> bool:
    """RocketMQ's ``Permission.checkPermission``: DENY wins; ANY needs PUB or SUB."""
    if owned & 1:  # DENY (plain ints: IntFlag arithmetic is slow on this path)
        return False
    if needed & 2:  # ANY
        return bool(owned & 12)  # PUB | SUB
    return bool(needed & owned)


# -- address patterns ------------------------------------------------------------------------

_IP = ipaddress.IPv4Address | ipaddress.IPv6Address


@functools.lru_cache(maxsize=4096)
def peer_ip(host: str) -> _IP | None:
    """A peer's host as an address (an IPv4-mapped IPv6 address as IPv4); None if not one."""
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


@attrs.frozen
class AddressPattern:
    """A ``whiteRemoteAddress`` / ``globalWhiteRemoteAddresses`` pattern (see the module).

    Attributes:
        text: the pattern as written.
    """

    text: str
    _any: bool = False
    _set: frozenset[_IP] = frozenset()
    # a range: (version, fixed leading parts, the index of the ranged part, first, last)
    _range: tuple[int, tuple[int, ...], int, int, int] | None = None

    @classmethod
    def parse(cls, text: str | None) -> AddressPattern:
        """Raises ValueError naming what is wrong."""
        text = (text or "").strip()
        if not text:
            return cls("")
        if text in ("*", "*.*.*.*", "*:*:*:*:*:*:*:*"):
            return cls(text, any=True)
        if "/" in text:
            raise ValueError(
                f"{text!r}: CIDR is not a RocketMQ 4.9.8 address pattern "
                "(write 10.0.*.*, 10.0.0.1-99, 10.0.0.{1,2} or a list)"
            )
        if text.endswith("}"):
            head, brace, tail = text.rpartition("{")
            if not brace or head[-1:] not in (".", ":"):
                raise ValueError(f"{text!r}: braces must hold the last part, as 192.168.0.{{1,2}}")
            items = [head + item.strip() for item in tail[:-1].split(",") if item.strip()]
            return cls(text, set=frozenset(_address(item, text) for item in items))
        if "," in text:
            items = [item.strip() for item in text.split(",") if item.strip()]
            return cls(text, set=frozenset(_address(item, text) for item in items))
        if "*" in text or "-" in text:
            return cls(text, range=_v6_range(text) if ":" in text else _v4_range(text))
        return cls(text, set=frozenset({_address(text, text)}))

    def matches(self, host: str) -> bool:
        """True when a peer at ``host`` matches (an empty pattern matches nothing)."""
        if self._any:
            return True
        if not self._set and self._range is None:
            return False  # empty: nothing
        ip = peer_ip(host)
        if ip is None:
            return False
        if self._set:
            return ip in self._set
        if self._range is None:
            return False
        version, fixed, index, first, last = self._range
        if ip.version != version:
            return False
        if version == 4:
            parts: tuple[int, ...] = tuple(ip.packed)
        else:
            packed = ip.packed
            parts = tuple(int.from_bytes(packed[i : i + 2], "big") for i in range(0, 16, 2))
        return parts[:index] == fixed and first <= parts[index] <= last


def _address(text: str, pattern: str) -> _IP:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        raise ValueError(f"{pattern!r}: {text!r} is not an IP address") from None


def _v4_range(text: str) -> tuple[int, tuple[int, ...], int, int, int]:
    parts = [part.strip() for part in text.split(".")]
    if len(parts) != 4:
        raise ValueError(f"{text!r}: an IPv4 pattern has 4 parts")
    index = next((i for i, part in enumerate(parts) if part == "*" or "-" in part), None)
    if index is None:
        raise ValueError(f"{text!r}: '*' stands for a whole part, as 192.168.1.*")
    if index == 0:
        raise ValueError(f"{text!r}: the first part cannot be a range (use *)")
    if any(part != "*" for part in parts[index + 1 :]):
        raise ValueError(f"{text!r}: only '*' may follow a range, as 192.168.1.* or 192.168.*.*")
    fixed = tuple(_number(part, 10, 255, text) for part in parts[:index])
    first, last = _span(parts[index], 10, 255, text)
    return 4, fixed, index, first, last


def _v6_range(text: str) -> tuple[int, tuple[int, ...], int, int, int]:
    if "*" in text and not text.endswith("*"):
        raise ValueError(f"{text!r}: '*' may only end an IPv6 pattern")
    groups = text.split(":")
    tail_any = text.endswith("*") and "-" in text
    ranged = groups[-2] if tail_any else groups[-1]
    if tail_any and groups[-1] != "*":
        raise ValueError(f"{text!r}: only '*' may follow a range")
    prefix = ":".join(groups[:-2] if tail_any else groups[:-1])
    width = 6 if tail_any else 7
    if "-" in prefix or "*" in prefix:
        raise ValueError(f"{text!r}: the range must be in the last part (or before a last '*')")
    fixed = _v6_prefix(prefix, width, text)
    first, last = _span(ranged, 16, 0xFFFF, text)
    return 6, fixed, width, first, last


def _v6_prefix(prefix: str, width: int, pattern: str) -> tuple[int, ...]:
    if "::" in prefix:
        head, _, tail = prefix.partition("::")
        left = [g for g in head.split(":") if g]
        right = [g for g in tail.split(":") if g]
        missing = width - len(left) - len(right)
        if missing < 0 or "::" in tail:
            raise ValueError(f"{pattern!r}: not an IPv6 prefix")
        groups = [*left, *(["0"] * missing), *right]
    else:
        groups = prefix.split(":")
        if len(groups) != width:
            raise ValueError(f"{pattern!r}: the parts before the range are not {width} groups")
    return tuple(_number(group, 16, 0xFFFF, pattern) for group in groups)


def _number(text: str, base: int, top: int, pattern: str) -> int:
    try:
        value = int(text, base)
    except ValueError:
        raise ValueError(f"{pattern!r}: {text!r} is not a number") from None
    if not 0 <= value <= top or text.startswith(("+", "-")):
        raise ValueError(f"{pattern!r}: {text!r} is out of range")
    return value


def _span(part: str, base: int, top: int, pattern: str) -> tuple[int, int]:
    if part == "*":
        return 0, top
    low, dash, high = part.partition("-")
    if not dash or not low:
        raise ValueError(f"{pattern!r}: {part!r} is not a range like 100-200")
    first, last = _number(low, base, top, pattern), _number(high, base, top, pattern)
    if first > last:
        raise ValueError(f"{pattern!r}: {part!r} starts after it ends")
    return first, last


# -- accounts and the file -------------------------------------------------------------------


@attrs.frozen(repr=False)
class AclAccount:
    """One account of ``plain_acl.yml``.

    Attributes:
        default_topic_perm, default_group_perm: :class:`Perm` bits of what is not listed.
        resource_perms: topic -> permission and ``%RETRY%group`` -> permission (:class:`Perm`
            bits; None when the account lists neither, as RocketMQ keeps it: an admin then
            passes every check).
    """

    access_key: str
    secret_key: str
    white_remote_address: AddressPattern = AddressPattern("")
    admin: bool = False
    default_topic_perm: int = Perm.DENY.value
    default_group_perm: int = Perm.DENY.value
    resource_perms: Mapping[str, int] | None = None

    def __repr__(self) -> str:
        return f"AclAccount(access_key={self.access_key!r}, admin={self.admin})"


@attrs.frozen
class PlainAclConfig:
    """What a ``plain_acl.yml`` says: the accounts by access key and the global white list."""

    accounts: Mapping[str, AclAccount] = attrs.field(factory=dict)
    global_white: tuple[AddressPattern, ...] = ()

    @classmethod
    def from_yaml(cls, text: str, source: str = "plain_acl.yml") -> PlainAclConfig:
        """Raises AclConfigError naming ``source`` and the line or account."""
        try:
            document = parse_yaml(text, source)
        except YamlSubsetError as exc:
            raise AclConfigError(str(exc)) from None
        if document is None:
            return cls()
        if not isinstance(document, dict):
            raise AclConfigError(f"{source}: not a mapping of globalWhiteRemoteAddresses/accounts")
        unknown = sorted(set(document) - _TOP_KEYS)
        if unknown:
            log.warning("%s: keys hanet does not use, ignored: %s", source, ", ".join(unknown))
        white: list[AddressPattern] = []
        for item in _list(document.get("globalWhiteRemoteAddresses"), source, "globalWhite"):
            if not isinstance(item, str):
                raise AclConfigError(f"{source}: globalWhiteRemoteAddresses holds a non-address")
            try:
                white.append(AddressPattern.parse(item))
            except ValueError as exc:
                raise AclConfigError(f"{source}: globalWhiteRemoteAddresses: {exc}") from None
        accounts: dict[str, AclAccount] = {}
        for number, item in enumerate(_list(document.get("accounts"), source, "accounts"), 1):
            account = _account(item, f"{source}: account {number}")
            if account.access_key in accounts:
                raise AclConfigError(
                    f"{source}: account {number}: accessKey {account.access_key!r} repeated"
                )
            accounts[account.access_key] = account
        return cls(accounts, tuple(white))


def _list(value: Any, source: str, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise AclConfigError(f"{source}: {what} is not a list")
    return value


def _account(item: Any, where: str) -> AclAccount:
    if not isinstance(item, dict):
        raise AclConfigError(f"{where}: not a mapping of accessKey, secretKey, ...")
    unknown = sorted(set(item) - _ACCOUNT_KEYS)
    if unknown:
        log.warning("%s: keys hanet does not use, ignored: %s", where, ", ".join(unknown))
    access_key, secret_key = item.get("accessKey"), item.get("secretKey")
    if not isinstance(access_key, str) or len(access_key) <= ACCESS_KEY_MIN_LENGTH:
        raise AclConfigError(f"{where}: accessKey must be longer than 6 characters")
    where = f"{where} ({access_key})"
    if not isinstance(secret_key, str) or len(secret_key) <= SECRET_KEY_MIN_LENGTH:
        raise AclConfigError(f"{where}: secretKey must be longer than 6 characters")
    try:
        white = AddressPattern.parse(_scalar(item, "whiteRemoteAddress"))
        admin_text = (_scalar(item, "admin") or "false").strip().lower()
        if admin_text not in ("true", "false", "yes", "no", "on", "off"):
            raise ValueError(f"admin is {admin_text!r}, not true or false")
        perms: dict[str, int] = {}
        for key, prefix in (("topicPerms", ""), ("groupPerms", RETRY_GROUP_TOPIC_PREFIX)):
            for entry in _list(item.get(key), where, key):
                name, equals, perm = str(entry).partition("=")
                if not isinstance(entry, str) or not equals or not name.strip():
                    raise ValueError(f"{key}: {entry!r} is not NAME=PERM")
                perms[prefix + name.strip()] = parse_perm(perm).value
        return AclAccount(
            access_key,
            secret_key,
            white,
            admin_text in ("true", "yes", "on"),
            parse_perm(_scalar(item, "defaultTopicPerm")).value,
            parse_perm(_scalar(item, "defaultGroupPerm")).value,
            perms or None,
        )
    except ValueError as exc:
        raise AclConfigError(f"{where}: {exc}") from None


def _scalar(item: Mapping[str, Any], key: str) -> str | None:
    value = item.get(key)
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{key} is not a single value")
    return value


class PlainAclFile:
    """A ``plain_acl.yml`` and its current config, reloaded by :meth:`poll` when it changed.

    Raises:
        AclConfigError: at construction, the file is missing or does not load.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.reloads = 0
        """Successful reloads after the first load."""
        self._stamp = self._stat()
        if self._stamp is None:
            raise AclConfigError(f"ACL is on but {path} does not exist")
        self.config = self._load()

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size, st.st_ino

    def _load(self) -> PlainAclConfig:
        try:
            text = self.path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise AclConfigError(f"cannot read {self.path}: {exc}") from None
        return PlainAclConfig.from_yaml(text, str(self.path))

    def poll(self) -> bool:
        """Reload the file if it changed since the last look; True when the config changed.
        A file that vanished or does not load is logged at ERROR (once per change) and the
        previous config stays."""
        stamp = self._stat()
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        if stamp is None:
            log.error("ACL: %s is gone; keeping the accounts last read", self.path)
            return False
        try:
            config = self._load()
        except AclConfigError as exc:
            log.error("ACL: not reloaded, keeping the accounts last read: %s", exc)
            return False
        self.config = config
        self.reloads += 1
        log.info("ACL: reloaded %s (%d accounts)", self.path, len(config.accounts))
        return True
