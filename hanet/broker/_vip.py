"""RocketMQ's VIP channel: a broker serves its broker port on ``listenPort - 2`` as well
(4.9.8's ``fastRemotingServer``, the same requests served).

RocketMQ uses it between brokers: a 4.9.8 slave asks its master's GET_ALL_TOPIC_CONFIG there
(``BrokerOuterAPI.getAllTopicConfig`` with ``MixAll.brokerVIPChannel``), so a RocketMQ slave
copies a hanet master's topics only when the master serves it. Clients with
``vipChannelEnabled`` send there too.

It is opened when the broker port has a fixed number above 2 (not 0, "any free port") and
``vip_channel`` is set (the default); a port-2 that cannot be bound is logged at WARNING and
the broker runs without it.
"""

from __future__ import annotations

import logging

import trio

from hanet.channel import format_address

__all__ = ["VIP_CHANNEL_OFFSET", "open_vip_listeners"]

log = logging.getLogger("hanet.broker")

VIP_CHANNEL_OFFSET = 2
"""The VIP channel's port is the broker port minus this (RocketMQ's)."""


async def open_vip_listeners(
    host: str, port: int, *, avoid: int | None = None
) -> list[trio.SocketListener]:
    """Listeners of the VIP channel of a broker port on ``host:port`` (none for port 0 or a
    port below 3, or when ``port - 2`` cannot be bound: logged at WARNING). ``avoid``: a port
    of the broker's own opened after this one (its HA port): never taken for the VIP channel
    (a broker whose HA port is its port - 2 runs without it, with a WARNING)."""
    if port <= VIP_CHANNEL_OFFSET:
        return []
    vip = port - VIP_CHANNEL_OFFSET
    if vip == avoid:
        log.warning(
            "no VIP channel (RocketMQ's broker port - 2): %s is this broker's HA port; "
            "RocketMQ slaves cannot copy this broker's topics",
            format_address((host, vip)),
        )
        return []
    try:
        listeners = await trio.open_tcp_listeners(vip, host=host)
    except OSError as exc:
        log.warning(
            "cannot serve the VIP channel (RocketMQ's broker port - 2) on %s: %s; RocketMQ "
            "slaves cannot copy this broker's topics",
            format_address((host, vip)),
            exc.strerror or exc,
        )
        return []
    log.info("VIP channel (RocketMQ's broker port - 2) on %s", format_address((host, vip)))
    return listeners
