"""Layer 3: serving ``sluice run``'s port as kube-scheduler serves its own.

* :mod:`.guard`: delegated authentication (TokenReview) and authorization
  (SubjectAccessReview of the path) as an aiohttp middleware, probes open;
* :mod:`.ttl_cache`: how long review answers are kept;
* :mod:`.tls`: the server's TLS context from a given or self-made certificate;
* :mod:`.certificates`: self-made certificates (this port's, ``sluice controller --dev``'s
  webhook, the tests').

The reviews themselves are the backend's (``scheduler.kube.reviews`` implements
:class:`~scheduler.serving.guard.AccessReviewer`); nothing here talks to the API server.
"""
