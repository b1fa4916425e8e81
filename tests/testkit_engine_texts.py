"""Engines as source text, for tests that write one into a pytester project (`makepyfile`) and name it with
`--engine MODULE:Engine`."""

# Supports `generate` and nothing else: a prediction that requires another capability is NOT APPLICABLE, its
# reason "no CAPABILITY here". Nothing is ever generated.
ONLY_GENERATE = """
class Engine:
    name = "only-generate"
    def supports(self, capability):
        return None if capability == "generate" else f"no {capability} here"
    def load_model(self, kind): raise NotImplementedError
    def session(self, model): raise NotImplementedError
    def cancel_token(self): raise NotImplementedError
"""
