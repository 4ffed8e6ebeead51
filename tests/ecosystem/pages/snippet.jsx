// Runs a snippet of the docs as written: build.mjs copies it out of the Markdown to
// dist/snippets/<name>.jsx and aliases `snippet` to it; the names it leaves free (baseUrl,
// getToken, sessionId, onNewReply) come from snippet-globals.js (esbuild's inject). The component
// it exports (its only export) is mounted with ?session=<id> as its sessionId, under StrictMode
// with ?strict=1.
import { StrictMode } from "react";
import { createRoot } from "react-dom/client";
import * as snippet from "snippet";

const [Root] = Object.values(snippet);
const params = new URLSearchParams(location.search);
const sessionId = params.get("session");
const root = <Root sessionId={sessionId} />;
createRoot(document.getElementById("root")).render(params.get("strict") === "1" ? <StrictMode>{root}</StrictMode> : root);
