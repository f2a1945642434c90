"""Layer 4: ``sluice controller``, the kopf-based companion of the scheduler.

It keeps the ``default`` Queue in existence and validates PodGroups and Queues in an admission
webhook. It is the only package that imports kopf, and it runs in a process of its own
(:func:`scheduler.controllers.main.run_controller`), because kopf takes over the event loop's
tasks and the process's signals.

* :mod:`.validation`: what the webhook refuses, as pure functions (no kopf).
* :mod:`.api_client`: the few API calls of the controller itself (get and create a Queue).
* :mod:`.operator`: the kopf registry, its handlers and the kopf settings.
* :mod:`.main`: ``run_controller``, what ``sluice controller`` calls.

Nothing is imported here, so that importing :mod:`.validation` does not import kopf.
"""
