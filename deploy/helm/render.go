package helm

import (
	"fmt"
	"io"
	"log"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
)

// Options are what a rendering of the chart takes besides its directory.
type Options struct {
	// ReleaseName is the release's name, from which the chart names its objects.
	// Default "fleetwatch", with which they are named as the kustomize base's.
	ReleaseName string
	// Namespace is the release's namespace. Default "fleetwatch".
	Namespace string
	// Values override the chart's values.yaml, as `helm template -f` does; they are
	// not modified.
	Values map[string]any
}

// Render renders the chart in dir as `helm template` does, offline: it checks the values
// against the chart's values.schema.json, and returns the manifests, the templates' in
// Helm's install order, as one YAML stream. NOTES.txt is rendered too, and must render,
// but is not returned.
func Render(dir string, opts Options) (string, error) {
	chrt, err := loader.Load(dir)
	if err != nil {
		return "", fmt.Errorf("loading the chart %s: %w", dir, err)
	}
	install := action.NewInstall(&action.Configuration{Log: log.New(io.Discard, "", 0).Printf})
	install.DryRun, install.ClientOnly, install.Replace = true, true, true
	install.ReleaseName = opts.ReleaseName
	if install.ReleaseName == "" {
		install.ReleaseName = "fleetwatch"
	}
	install.Namespace = opts.Namespace
	if install.Namespace == "" {
		install.Namespace = "fleetwatch"
	}
	// Install merges the values into the chart's, in place.
	rel, err := install.Run(chrt, deepCopy(opts.Values))
	if err != nil {
		return "", err
	}
	return rel.Manifest, nil
}

// deepCopy copies the maps and slices of v, as YAML decodes them.
func deepCopy(v map[string]any) map[string]any {
	out := make(map[string]any, len(v))
	for k, x := range v {
		out[k] = deepCopyValue(x)
	}
	return out
}

func deepCopyValue(x any) any {
	switch x := x.(type) {
	case map[string]any:
		return deepCopy(x)
	case []any:
		s := make([]any, len(x))
		for i, e := range x {
			s[i] = deepCopyValue(e)
		}
		return s
	default:
		return x
	}
}
