// Loaded between require.js and embed-amd.js on pages with saved widgets (nb_ipywidgets_js
// in _config.yml); found necessary by the browser tests in tests_site/.
(function () {
  // 1. The widget manager finds its own files (the Font Awesome fonts its CSS uses) relative
  //    to the URL of its AMD module, which require.js would otherwise place beside the page
  //    (chapters/@jupyter-widgets/html-manager/dist/). Point that module at this folder.
  var here = new URL(".", document.currentScript.src).href.replace(/\/$/, "");
  window.__jupyter_widgets_assets_path__ = here + "/";
  window.require.config({ paths: { "@jupyter-widgets/html-manager/dist": here } });

  // 2. @jupyter-widgets/controls typesets widget labels with the MathJax 2 API
  //    (MathJax.Hub.Queue), which MathJax 3 lacks: every labelled widget threw a TypeError.
  //    Give MathJax 3 that one entry point. MathJax loads deferred, so before DOMContentLoaded.
  document.addEventListener("DOMContentLoaded", function () {
    var mj = window.MathJax;
    if (!mj || mj.Hub || typeof mj.typesetPromise !== "function") return;
    mj.Hub = {
      Queue: function () {
        var nodes = [];
        for (var i = 0; i < arguments.length; i++) {
          var job = arguments[i];
          if (Array.isArray(job) && job[0] === "Typeset" && job[2]) nodes.push(job[2]);
        }
        if (nodes.length) mj.startup.promise.then(function () { return mj.typesetPromise(nodes); });
      },
    };
  });
})();
