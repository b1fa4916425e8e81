"""Pack `serving`: Serving: cancellation, stepped prefill and the lane host, sampling."""
