"""The Ray side: code that runs in Ray job drivers, the Train controller and training workers.

Nothing here runs in the service process (that is ``launcher``) and nothing imports the
server package: the two sides meet over HTTP (the internal API), in ``storage`` and in
``shunter.wire``.
"""
