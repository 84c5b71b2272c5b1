// Swagger UI for /docs, loaded from /vendor/swagger-ui (no CDN, no inline script: see CSP).
window.ui = SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#swagger-ui",
  deepLinking: true,
  presets: [SwaggerUIBundle.presets.apis],
  layout: "BaseLayout",
});
