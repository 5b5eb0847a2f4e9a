#!/usr/bin/env bash
# Fetch the JavaScript the built site needs offline (MathJax, require.js, the widget
# html-manager) from the npm registry at pinned versions, into DEST (default _vendor).
# _config.yml serves DEST through html_static_path; see toolchain-notes section 2.
# Idempotent: does nothing when DEST/.complete exists. Fails loudly on any error.
set -euo pipefail

DEST="${1:-_vendor}"
MATHJAX="mathjax@3.2.2"
HTML_MANAGER="@jupyter-widgets/html-manager@1.0.6"
REQUIREJS="requirejs@2.3.4"

if [[ -f "$DEST/.complete" ]]; then
  echo "fetch_vendor: $DEST is complete; nothing to do"
  exit 0
fi
command -v npm >/dev/null || { echo "fetch_vendor: npm is required (apt-get install npm)" >&2; exit 1; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

(cd "$tmp" && npm pack --silent "$MATHJAX" "$HTML_MANAGER" "$REQUIREJS" >/dev/null)
for pkg in mathjax requirejs html-manager; do
  tgz=$(ls "$tmp"/*"$pkg"-*.tgz)
  mkdir -p "$tmp/$pkg"
  tar -xzf "$tgz" -C "$tmp/$pkg"
done

rm -rf "$DEST"
mkdir -p "$DEST/mathjax/output/chtml" "$DEST/mathjax/input/tex" "$DEST/html-manager"

# MathJax: the combined component plus what it loads lazily (fonts, TeX extensions).
mj="$tmp/mathjax/package"
cp "$mj/es5/tex-mml-chtml.js" "$mj/LICENSE" "$DEST/mathjax/"
cp -r "$mj/es5/output/chtml/fonts" "$DEST/mathjax/output/chtml/"
cp -r "$mj/es5/input/tex/extensions" "$DEST/mathjax/input/tex/"

# require.js (AMD loader for the widget manager).
cp "$tmp/requirejs/package/require.js" "$DEST/require.js"

# html-manager: the AMD embed script, its lazily loaded chunks and the FontAwesome fonts.
hm="$tmp/html-manager/package"
cp "$hm/dist/embed-amd.js" "$hm/dist/"*.embed.js "$hm/LICENSE" "$DEST/html-manager/"
cp "$hm/dist/"*.woff "$hm/dist/"*.woff2 "$hm/dist/"*.ttf "$hm/dist/"*.eot "$hm/dist/"*.svg "$DEST/html-manager/"

# Map the AMD id of html-manager's assets to the local copy (next to this script).
cat > "$DEST/require-config.js" <<'EOF'
(function(){var s=document.currentScript.src;require.config({paths:{'@jupyter-widgets/html-manager/dist':
  s.slice(0,s.lastIndexOf('/')+1)+'html-manager'}});})();
EOF

for f in mathjax/tex-mml-chtml.js require.js require-config.js html-manager/embed-amd.js; do
  [[ -s "$DEST/$f" ]] || { echo "fetch_vendor: missing $DEST/$f" >&2; exit 1; }
done
touch "$DEST/.complete"
echo "fetch_vendor: wrote $DEST ($(du -sh "$DEST" | cut -f1))"
