"""The layer every untrusted input passes before falsify acts on it: files, JSON and a peer's bytes that falsify did
not write.

    safefile      every path falsify reads or writes on a user's behalf: no link followed out of the project,
                  no FIFO waited on, a byte limit on every read, atomic replacement, OSError named in words
    boundedjson   every JSON document from outside (wire lines, HTTP bodies, envelopes, statements, reports,
                  config.json): bounded size, depth, digits and keys, then typed field access (`Field`)
    deadline      a peer's bytes over HTTP (an engine's replies to deadline_http's connections, the reference
                  servers' requests): each recv given what is left of one deadline, so no peer drips bytes past it

Each failure is one named error line (FileLayerError, JsonFormatError, FieldError) naming the file or field; a peer
past its deadline is the TimeoutError a socket read raises, which http.client's and http.server's callers handle.
"""
