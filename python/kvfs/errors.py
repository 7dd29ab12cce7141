"""Exceptions: OSError subclasses carrying the errno kvfs(5) and kvfs(8) give."""


class KvfsError(OSError):
    """errno, strerror (the reason) and filename, as OSError has them."""


class FormatError(KvfsError):
    """A file that is not a valid kvfs chunk: EINVAL (malformed or
    truncated), EPROTO (not a chunk file, or another version), EBADMSG (a
    checksum mismatch)."""


class BlendError(KvfsError):
    """The mount refused or failed a blend: the daemon's errno and reason."""
