"""DLedger mode: Raft replication of the commit log (the foundation, sans-IO).

What is here:

- the entry and index entry formats of DLedger's files (:class:`DLedgerEntry`,
  :func:`encode_entry`, :func:`decode_entry`, :class:`IndexEntry`, :func:`pack_entry` for a
  batch, ...; ``_entry.py``);
- the log the Raft core works on (:class:`RaftLog`, a Protocol, and :class:`InMemoryLog`;
  ``_log.py``);
- the Raft state machine of one node (:class:`RaftNode`; ``_raft.py``; its messages, config
  and :class:`Output` in ``_messages.py``): pure, no I/O and no
  trio, driven by :meth:`RaftNode.tick`, :meth:`RaftNode.receive` and
  :meth:`RaftNode.propose`, each returning an :class:`Output` the driver acts on (persist the
  hard state and the log writes it names, then send: the core never writes its log).
  Pre-vote, check quorum, fast back-off by term, commit of current-term entries only (a
  no-op opens each term), pipelined appends; per-follower progress (``Progress``;
  ``_progress.py``);
- the file-backed log (:class:`FileLog`; ``_filelog.py``): DLedger's data and index files
  (Raft index ``i`` is DLedger index ``i - 1``; a no-op is an entry with an empty body), the
  term and vote persisted atomically, recovery that checks each entry's body CRC and the
  RocketMQ record inside it and drops a torn tail;
- the peer wire format (:func:`encode_envelope`, :func:`decode_envelope`, :class:`PeerCodec`,
  :class:`Hello`; ``_codec.py``) behind the framework's length-field framing;
- a node's settings and outcomes (:class:`NodeConfig`, :class:`PutOutcome`; ``_config.py``)
  and the records a leader puts in its entries (:func:`put_records`, :func:`put_record`;
  ``_records.py``), re-stamped for the commit log view without decoding them
  (:func:`record_place`, :func:`stamp_into`; ``_stamp.py``; the view keeps entry bodies in
  :class:`Bodies`, ``_view.py``);
- the networked node (:class:`DLedgerNode`; ``_node.py``): one trio
  task drives a :class:`RaftNode` (persist, then send, apply, answer), one reconnecting
  connection per peer, committed entries applied to a :class:`hanet.store.CommitLogStore`
  view (consume queues, ``hanet pull`` / ``dump`` / ``verify`` work on it); each peer
  connection speaks for the member it authenticated as (mutual TLS, or its ``--peers``
  address; ``_peers.py``), and what no honest member sends is refused
  (:attr:`Output.refused`) and closes its connection; its fsyncs and hard state writes run
  in worker threads (:class:`Persister`; ``_persist.py``), and what a batch of inputs sends
  or answers leaves only once what it depends on is durable (a follower's acknowledgements of
  one batch batched: :func:`coalesce_acks`).

The test tools live in :mod:`hanet.testing`: ``MemoryNetwork`` runs nodes over memory streams,
``simulate`` and ``Cluster`` check the Raft core's safety under seeded faults.

The broker port of a node (``hanet dledger``) lives in the command line
(``hanet/cli/_dledger.py``): it speaks :mod:`hanet.protocol`, which this layer may not import.

Not built yet: membership changes, leadership transfer, snapshots / log compaction.
"""

from typing import TYPE_CHECKING

from hanet.lazy import lazy_exports

from ._entry import (
    BLANK_MAGIC,
    ENTRY_HEADER_SIZE,
    ENTRY_MAGIC,
    INDEX_ENTRY_SIZE,
    DLedgerEntry,
    IndexEntry,
    decode_entry,
    decode_index_entry,
    encode_blank,
    encode_entry,
    encode_index_entry,
    entry_body_crc,
    index_entry_offset,
    pack_entry,
)
from ._errors import (
    BodyCrcError,
    DLedgerError,
    EntryFormatError,
    IllegalTransitionError,
    NodeNotRunningError,
    TruncatedEntryError,
)
from ._log import InMemoryLog, LogEntry, RaftLog
from ._messages import (
    TRANSITIONS,
    AppendRequest,
    AppendResponse,
    AppendResult,
    AppendStatus,
    Envelope,
    HardState,
    Message,
    Output,
    PreVoteRequest,
    PreVoteResponse,
    RaftConfig,
    RandomSource,
    Role,
    VoteRequest,
    VoteResponse,
)
from ._raft import RaftNode

if TYPE_CHECKING:
    from ._codec import (
        DEFAULT_MAX_PEER_FRAME,
        Hello,
        PeerCodec,
        append_entries_py,
        decode_envelope,
        encode_envelope,
        peer_frame_handlers,
    )
    from ._config import NodeConfig, NodeStatus, PeerStatus, PutOutcome, parse_peers
    from ._filelog import DEFAULT_DATA_FILE_SIZE, DEFAULT_INDEX_FILE_SIZE, FileLog, LogRecovery
    from ._node import DLedgerNode, coalesce_acks
    from ._persist import Persister
    from ._records import put_record, put_records
    from ._stamp import RecordPlace, record_fields, record_place, stamp_into
    from ._view import Bodies, CommitLogView, NotARecordError, view_records_py

__all__ = [
    "BLANK_MAGIC",
    "DEFAULT_DATA_FILE_SIZE",
    "DEFAULT_INDEX_FILE_SIZE",
    "DEFAULT_MAX_PEER_FRAME",
    "ENTRY_HEADER_SIZE",
    "ENTRY_MAGIC",
    "INDEX_ENTRY_SIZE",
    "TRANSITIONS",
    "AppendRequest",
    "AppendResponse",
    "AppendResult",
    "AppendStatus",
    "Bodies",
    "BodyCrcError",
    "CommitLogView",
    "DLedgerEntry",
    "DLedgerError",
    "DLedgerNode",
    "EntryFormatError",
    "Envelope",
    "FileLog",
    "HardState",
    "Hello",
    "IllegalTransitionError",
    "InMemoryLog",
    "IndexEntry",
    "LogEntry",
    "LogRecovery",
    "Message",
    "NodeConfig",
    "NodeNotRunningError",
    "NodeStatus",
    "NotARecordError",
    "Output",
    "PeerCodec",
    "PeerStatus",
    "Persister",
    "PreVoteRequest",
    "PreVoteResponse",
    "PutOutcome",
    "RaftConfig",
    "RaftLog",
    "RaftNode",
    "RandomSource",
    "RecordPlace",
    "Role",
    "TruncatedEntryError",
    "VoteRequest",
    "VoteResponse",
    "append_entries_py",
    "coalesce_acks",
    "decode_entry",
    "decode_envelope",
    "decode_index_entry",
    "encode_blank",
    "encode_entry",
    "encode_envelope",
    "encode_index_entry",
    "entry_body_crc",
    "index_entry_offset",
    "pack_entry",
    "parse_peers",
    "peer_frame_handlers",
    "put_record",
    "put_records",
    "record_fields",
    "record_place",
    "stamp_into",
    "view_records_py",
]

# The file log, the peer codec and the networked node load on first use: ``import
# hanet.dledger`` stays sans-IO (no trio, no store, no channels) for the Raft core's users.
_LAZY: dict[str, str] = {
    "DEFAULT_DATA_FILE_SIZE": "._filelog",
    "DEFAULT_INDEX_FILE_SIZE": "._filelog",
    "FileLog": "._filelog",
    "LogRecovery": "._filelog",
    "DEFAULT_MAX_PEER_FRAME": "._codec",
    "Hello": "._codec",
    "PeerCodec": "._codec",
    "decode_envelope": "._codec",
    "encode_envelope": "._codec",
    "peer_frame_handlers": "._codec",
    "DLedgerNode": "._node",
    "NodeConfig": "._config",
    "NodeStatus": "._config",
    "PeerStatus": "._config",
    "PutOutcome": "._config",
    "parse_peers": "._config",
    "put_records": "._records",
    "put_record": "._records",
    "Persister": "._persist",
    "coalesce_acks": "._node",
    "RecordPlace": "._stamp",
    "record_fields": "._stamp",
    "record_place": "._stamp",
    "stamp_into": "._stamp",
    "Bodies": "._view",
    "CommitLogView": "._view",
    "NotARecordError": "._view",
    "view_records_py": "._view",
    "append_entries_py": "._codec",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
