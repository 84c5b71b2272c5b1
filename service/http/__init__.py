"""HTTP edge: thin routes over the domain modules, one exception handler, middlewares."""
