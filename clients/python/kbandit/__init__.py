"""This file contains the public names of kbandit, the Python client of the kbandit
ask/tell optimization server (standard library only).

    import kbandit
    client = kbandit.Client("http://127.0.0.1:8080", token="...")  # or $KB_URL, $KB_TOKEN
    study = client.get_or_create_study("svc", params={"C": (1e-3, 1e3, "log"),
                                                      "kernel": ["rbf", "poly"]})
    with study.trial() as t:          # heartbeats while the block runs
        t.tell(evaluate(**t.params))  # an exception fails the trial instead
    study.optimize(lambda t: evaluate(**t.params), n_trials=50, n_workers=4)
    print(study.best().params)
"""
from .client import Client
from .errors import (Conflict, ConnectionFailed, InvalidRequest, KbanditError,
                     NoTrialAvailable, NotFound, ServerError, Unauthorized, Unavailable)
from .study import Study
from .trial import AskResult, TellResult, Trial, TrialScope
from ._version import __version__
__all__ = ["__version__", "Client", "Study", "Trial", "TrialScope", "AskResult", "TellResult",
           "KbanditError", "InvalidRequest", "Unauthorized", "NotFound", "Conflict",
           "ServerError", "Unavailable", "ConnectionFailed", "NoTrialAvailable"]
