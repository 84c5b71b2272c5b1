"""The service-side launcher: runs inside the service process, never on Ray.

``launcher.ray_launcher`` starts and watches attempts as Ray jobs (the service loads it by entry
point, ``service.launch``), ``launcher.ray_head`` starts the embedded Ray head and
``launcher.head_guard`` stops it if the service dies. The Ray-side job code is ``worker``;
the two share only ``storage`` and ``shunter.wire``.
"""
