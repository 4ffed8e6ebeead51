// Runs a snippet of the docs as written: build.mjs copies it out of the Markdown to
// dist/snippets/<name>.jsx and aliases `snippet` to it; the names it leaves free (baseUrl,
// getToken, sessionId) come from snippet-globals.js (esbuild's inject). The component it exports
// (its only export) is mounted with ?session=<id> as its sessionId.
import { createRoot } from "react-dom/client";
import * as snippet from "snippet";

const [Root] = Object.values(snippet);
const sessionId = new URLSearchParams(location.search).get("session");
createRoot(document.getElementById("root")).render(<Root sessionId={sessionId} />);
