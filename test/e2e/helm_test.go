package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/fleetwatch/fleetwatch/internal/testenv"
)

// TestHelmChart renders the Helm chart deploy/helm/fleetwatch with Helm's Go module, for
// its default values and each install of its ci/ values, and checks and applies each
// rendering as TestDeployManifests does kustomize's: the objects fit together, pass
// server-side validation under the restricted Pod Security Standard, and grant the
// ServiceAccount what the daemon needs and nothing more. Helm renders in deploy/helm's
// module, whose command template prints what `helm template` would, so that Helm's
// module stays out of this one. Each install has a namespace of its own, as the
// permissions checked are the namespace's.
func TestHelmChart(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Clusters: 1})
	helmDir := filepath.Join("..", "..", "deploy", "helm")
	template := filepath.Join(t.TempDir(), "template")
	build := exec.Command("go", "build", "-o", template, "./cmd/template")
	build.Dir, build.Env = helmDir, append(os.Environ(), "GOWORK=off")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/template in %s: %v\n%s", helmDir, err, b)
	}
	chart := filepath.Join(helmDir, "fleetwatch")

	for _, tc := range []struct {
		// values is the file ci/<values>-values.yaml of the chart, or none.
		values    string
		namespace string
		want      deployWant
	}{
		{namespace: "fleetwatch"},
		{values: "sharded", namespace: "fleet-sharded", want: deployWant{handover: true}},
		// cert-manager is not installed: crds gives the apiserver its kinds.
		{values: "sharded-cert-manager", namespace: "fleet-shards", want: deployWant{handover: true, certificates: true, crds: filepath.Join("testdata", "cert-manager-crds.yaml")}},
		{values: "home-delegated", namespace: "fleet-home", want: deployWant{watchesHome: true}},
	} {
		name := "defaults"
		args := []string{"-namespace", tc.namespace}
		if tc.values != "" {
			name = tc.values
			args = append(args, "-f", filepath.Join(chart, "ci", tc.values+"-values.yaml"))
		}
		args = append(args, chart)
		t.Run(name, func(t *testing.T) {
			render := func() string {
				out, err := exec.CommandContext(t.Context(), template, args...).Output()
				if err != nil {
					if ee, ok := err.(*exec.ExitError); ok {
						t.Fatalf("template %s: %v\n%s", args, err, ee.Stderr)
					}
					t.Fatal(err)
				}
				return string(out)
			}
			out := render()
			if again := render(); again != out {
				t.Fatalf("the chart's rendering with %s is not stable: two runs differ", name)
			}
			m := parseManifests(t, out)
			if s := m.of("Secret"); len(s) > 0 {
				t.Errorf("the chart renders %d Secrets; the Secrets are only referenced", len(s))
			}
			checkManifests(t, env, "the chart with "+name, out, m, tc.want)
		})
	}
}
