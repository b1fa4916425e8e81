"""The layer every untrusted input passes before falsify acts on it: files and JSON that falsify did not write.

    safefile      every path falsify reads or writes on a user's behalf: no link followed out of the project,
                  no FIFO waited on, a byte limit on every read, atomic replacement, OSError named in words
    boundedjson   every JSON document from outside (wire lines, HTTP bodies, envelopes, statements, reports,
                  config.json): bounded size, depth, digits and keys, then typed field access (`Field`)

Each failure is one named error line (FileLayerError, JsonFormatError, FieldError) naming the file or field.
"""
