"""DLedger (Raft) mode: work in progress."""
