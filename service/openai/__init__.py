"""The OpenAI-compatible fine-tuning API's domain: uploaded files (``files``), the model
catalog (``catalog``), request -> JobSpec and job -> fine-tuning object (``translate``), and
the fine-tuning operations over our jobs (``fine_tuning``). Never imports FastAPI; the routes
are ``service.http.routes.openai``."""
