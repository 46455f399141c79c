"""kbandit: the Python client of the kbandit ask/tell optimization server.

    import kbandit
    client = kbandit.Client("http://127.0.0.1:8080", token="...")   # or $KB_URL, $KB_TOKEN
    study = client.get_or_create_study("svc", params={"C": (1e-3, 1e3, "log"),
                                                      "kernel": ["rbf", "poly"]})
    with study.trial() as t:          # heartbeats while the block runs
        t.tell(evaluate(**t.params))  # an exception fails the trial instead
    study.optimize(lambda t: evaluate(**t.params), n_trials=50, n_workers=4)
    print(study.best().params)

This file contains the package's public names.
"""
from .client import Client
from .errors import (Conflict, ConnectionFailed, InvalidRequest, KbanditError,
                     NoTrialAvailable, NotFound, ServerError, Unauthorized, Unavailable)
from .study import Study
from .trial import AskResult, TellResult, Trial, TrialScope

__version__ = "0.1.0"
__all__ = ["Client", "Study", "Trial", "TrialScope", "AskResult", "TellResult",
           "KbanditError", "InvalidRequest", "Unauthorized", "NotFound", "Conflict",
           "ServerError", "Unavailable", "ConnectionFailed", "NoTrialAvailable"]
