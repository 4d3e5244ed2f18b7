#!/usr/bin/env bash
# Installs check.mjs's one dependency, the official MCP TypeScript SDK at
# the version package.json pins, into compat/mcpclient/node_modules.
set -euo pipefail
cd "$(dirname "$0")"
npm install --no-audit --no-fund --silent
