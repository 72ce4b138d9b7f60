"""The decision-trace console's static files (index.html, console.js, console.css), served by `fastcrag.server`."""
