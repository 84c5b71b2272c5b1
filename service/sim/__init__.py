"""The offline scheduler simulator: ``engine`` replays a trace on a virtual clock through the
same ``service.policy.planner`` the live loop uses, ``trace`` reads and generates traces, and
``report`` summarises a run (waits, utilisation, fairness, ETA calibration). The live loop in
``service.scheduler`` never imports this package."""
