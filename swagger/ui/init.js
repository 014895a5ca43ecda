// infergate: Swagger UI bootstrap. Kept out of index.html so a strict
// Content-Security-Policy without 'unsafe-inline' still works.
window.onload = function () {
  window.ui = SwaggerUIBundle({
    url: "/netlox/v1/swagger.json",
    dom_id: "#swagger-ui",
    deepLinking: true,
    docExpansion: "list",
    presets: [SwaggerUIBundle.presets.apis, SwaggerUIStandalonePreset],
    layout: "StandaloneLayout",
  });
};
