// Starts Swagger UI on the service's own OpenAPI document. A file rather than an inline script: the docs page
// runs under the same Content-Security-Policy as the web page (script-src 'self', no inline script).
"use strict";
(() => {
  const root = document.getElementById("docs");
  window.ui = SwaggerUIBundle({
    url: root.dataset.openapi,
    domNode: root,
    presets: [SwaggerUIBundle.presets.apis],
    layout: "BaseLayout",
    deepLinking: true,
    displayOperationId: true,
    displayRequestDuration: true,
    docExpansion: "list",
    defaultModelsExpandDepth: 0,
    validatorUrl: null, // no badge fetched from anywhere: the page talks to its own origin only
  });
})();
