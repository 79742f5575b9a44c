// Package browser drives the web page of `fleetwatch serve` in a real headless Chromium.
package browser
