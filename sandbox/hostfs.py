"""Host-side file operations confined to a root (public face of ``sandbox._hostfs``).

The upload route, the thread-data middleware and ``present_files`` write under
a user's thread directory without following links out of it; they use these
names rather than the sandbox package's private module.
"""

from sandbox._hostfs import (
    BINARY_SNIFF_BYTES,
    HostRoot,
    ensure_dirs,
    glob_paths,
    glob_to_regex,
    grep_files,
    is_regular_file,
    list_entries,
    open_dir,
    read_bytes,
    read_head,
    read_text,
    write_bytes,
)

__all__ = [
    "BINARY_SNIFF_BYTES",
    "HostRoot",
    "ensure_dirs",
    "glob_paths",
    "glob_to_regex",
    "grep_files",
    "is_regular_file",
    "list_entries",
    "open_dir",
    "read_bytes",
    "read_head",
    "read_text",
    "write_bytes",
]
