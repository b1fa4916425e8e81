"""Pack `gdn`: Gated DeltaNet: chunked = recurrent kernels, causality, split calls = one call."""
