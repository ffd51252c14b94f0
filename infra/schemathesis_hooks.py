"""Schemathesis hooks for infra/schemathesis.sh.

Long polls are capped at 1 s: the API allows `wait_ms` up to 20 s, and generated requests
that ask for it on an empty partition or queue would spend the run's time budget waiting.
Values that are not a number (negative tests) are sent as generated.
"""

import schemathesis

CAP_MS = 1000


def _cap(container):
    if isinstance(container, dict):
        wait = container.get("wait_ms")
        if isinstance(wait, int) and not isinstance(wait, bool) and wait > CAP_MS:
            container["wait_ms"] = CAP_MS
        elif isinstance(wait, str) and wait.isdigit() and int(wait) > CAP_MS:
            container["wait_ms"] = str(CAP_MS)


@schemathesis.hook
def before_call(ctx, case, **kwargs):
    _cap(case.query)
    _cap(case.body)
