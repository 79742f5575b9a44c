package main

import (
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

func TestKubeconfigCommand(t *testing.T) {
	dir := t.TempDir()
	src := clientcmdapi.NewConfig()
	src.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "secret-token"}
	for _, name := range []string{"prod", "arn:aws:eks:eu-west-1:123:cluster/stage"} {
		src.Clusters[name] = &clientcmdapi.Cluster{Server: "https://10.0.0.1:6443"}
		src.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: "u"}
	}
	path := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*src, path); err != nil {
		t.Fatal(err)
	}
	out, err := execute(t, "kubeconfig", "--kubeconfig", path, "--server-address", "127.0.0.1:9090")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if strings.Contains(out, "secret-token") {
		t.Fatal("the printed kubeconfig carries a credential of a watched cluster")
	}
	kc, err := clientcmd.Load([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"all":  "http://127.0.0.1:9090/clusters/*",
		"prod": "http://127.0.0.1:9090/clusters/prod",
		"arn:aws:eks:eu-west-1:123:cluster/stage": "http://127.0.0.1:9090/clusters/arn:aws:eks:eu-west-1:123:cluster%2Fstage",
	}
	if len(kc.Contexts) != len(want) {
		t.Errorf("%d contexts, want %d", len(kc.Contexts), len(want))
	}
	for ctx, server := range want {
		c, ok := kc.Contexts[ctx]
		if !ok {
			t.Errorf("no context %q", ctx)
			continue
		}
		if got := kc.Clusters[c.Cluster].Server; got != server {
			t.Errorf("context %q: server %q, want %q", ctx, got, server)
		}
	}
	if kc.CurrentContext != "all" {
		t.Errorf("current context %q, want all", kc.CurrentContext)
	}
	if _, err := execute(t, "kubeconfig", "--kubeconfig", path, "--daemon", "ftp://x"); err == nil || !strings.Contains(err.Error(), "--daemon") {
		t.Errorf("bad --daemon: %v", err)
	}
}
