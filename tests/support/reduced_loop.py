"""The loop at reduced scale for the end-to-end tests: the stages' settings (as WORX_*
variables) that make a `worx demo` finish in minutes on 2 cores, and the domains it finds."""

SMALL_LOOP = {
    "WORX_ROUTER__JOB_DOCS": "100",
    "WORX_TRAINER__MAX_STEPS": "8",
    "WORX_TRAINER__SEQ_LEN": "64",
    "WORX_TRAINER__MICRO_BATCH_SIZE": "4",
    "WORX_TRAINER__GRAD_ACCUM_STEPS": "1",
    "WORX_TRAINER__LR": "0.01",
    "WORX_TRAINER__EVAL_EVERY": "4",
    "WORX_TRAINER__GATE_MARGIN": "0.0",
}
NEW_DOMAINS = ("python_code", "legal")
