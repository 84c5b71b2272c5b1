"""A team's datasets and base models as content-addressed objects in storage (issue #28).

``checks``: what an upload must be (format, columns, rows, sample; an HF model folder).
``store``: upload (files first, manifest last), list, show, remove, garbage-collect, and the
submit-time resolution of ``ds-``/``mdl-``/``s3://`` references into a job's ``inputs``.
"""
