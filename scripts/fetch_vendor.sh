#!/usr/bin/env bash
# Fetch the JavaScript the built site needs offline (MathJax: the combined component, its fonts
# and TeX extensions) from the npm registry at a pinned version, into DEST (default _vendor).
# _config.yml serves DEST through html_static_path, so it is copied to _build/html/_static/.
# No widget JavaScript is fetched: no page embeds widget state (see nb_ipywidgets_js there).
# Idempotent: does nothing when DEST/.complete records the same pins. Fails loudly on any error.
set -euo pipefail

DEST="${1:-_vendor}"
MATHJAX="mathjax@3.2.2"
PINS="$MATHJAX"

if [[ -f "$DEST/.complete" && "$(cat "$DEST/.complete")" == "$PINS" ]]; then
  echo "fetch_vendor: $DEST is complete; nothing to do"
  exit 0
fi
command -v npm >/dev/null || { echo "fetch_vendor: npm is required (apt-get install npm)" >&2; exit 1; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

(cd "$tmp" && npm pack --silent "$MATHJAX" >/dev/null)
mkdir -p "$tmp/mathjax"
tar -xzf "$(ls "$tmp"/mathjax-*.tgz)" -C "$tmp/mathjax"

rm -rf "$DEST"
mkdir -p "$DEST/mathjax/output/chtml" "$DEST/mathjax/input/tex"

# MathJax: the combined component plus what it loads lazily (fonts, TeX extensions).
mj="$tmp/mathjax/package"
cp "$mj/es5/tex-mml-chtml.js" "$mj/LICENSE" "$DEST/mathjax/"
cp -r "$mj/es5/output/chtml/fonts" "$DEST/mathjax/output/chtml/"
cp -r "$mj/es5/input/tex/extensions" "$DEST/mathjax/input/tex/"

[[ -s "$DEST/mathjax/tex-mml-chtml.js" ]] || { echo "fetch_vendor: missing $DEST/mathjax/tex-mml-chtml.js" >&2; exit 1; }
echo "$PINS" > "$DEST/.complete"
echo "fetch_vendor: wrote $DEST ($(du -sh "$DEST" | cut -f1))"
