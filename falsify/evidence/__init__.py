"""Release evidence: in-toto statements about a gate run and a mutant run, reports, and a verifier.

Data flows one way: gate results + mutant report + the tree -> inputs (normalised, digested) -> statements ->
reports. `falsify verify` walks the same path backwards from a bundle: statements -> digests of the tree and of
the bundle's files -> the verdict re-derived from the bundle's results.

A bundle (`falsify evidence --out DIR`):

    evidence.intoto.jsonl   three in-toto Statement v1 lines, sorted keys, no absolute paths:
                            1. test-result v0.1 about the engine sources and weights;
                            2. contract evidence (our predicate): one entry per prediction, the mutants, the verdict;
                            3. the release report: REPORT.md and report.html, and the one time field.
    junit.xml               the gate's JUnit XML, normalised (durations, timestamp and hostname removed)
    results.json            the falsify pytest plugin's per-test results, normalised the same way
    mutation-report.json    the Stryker mutation-testing-report of the mutant run, when one was run
    REPORT.md, report.html  the verdict, one row per prediction, the mutants, the environment
    mutmut-report.json      with --mutmut-report: the Stryker report of a `falsify mutmut` run, normalised
    engines-matrix.json     with --matrix: a `falsify matrix` run's predictions x engines, normalised
    *.svg                   the report's figures (kill matrix, measured vs bound, decode gaps, mutmut)
    evidence.dsse.jsonl     with --sign: one DSSE envelope (Ed25519) per statement line (falsify/evidence/sign.py)
"""

SIGNATURES = "evidence.dsse.jsonl"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
TEST_RESULT_TYPE = "https://in-toto.io/attestation/test-result/v0.1"
CONTRACT_EVIDENCE_TYPE = "https://falsify.dev/attestation/contract-evidence/v1"
RELEASE_REPORT_TYPE = "https://falsify.dev/attestation/release-report/v1"

STATEMENTS = "evidence.intoto.jsonl"
JUNIT = "junit.xml"
RESULTS = "results.json"
MUTATION_REPORT = "mutation-report.json"
MUTMUT_REPORT = "mutmut-report.json"
MATRIX = "engines-matrix.json"
REPORT_MD = "REPORT.md"
REPORT_HTML = "report.html"
