"""The health autopilot: the hang watch (``hang``, its pure rule ``hang_rule``), the straggler
watch (``straggler``, ``straggler_rule``), node cordons (``cordons``), the divergence guard's
events (``divergence``), what a metrics batch triggers (``watch``) and the ranks' files and
stacks (``rank_files``). It acts on jobs through ``service.jobs`` (states, attempt loss) and
is driven by the scheduler tick and the internal API; ``service.jobs`` never imports it.
"""
