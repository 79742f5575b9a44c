package main

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/fleetwatch/fleetwatch/cluster"
	"github.com/fleetwatch/fleetwatch/config"
)

// allContext names the context that reaches every cluster at once.
const allContext = "all"

func newKubeconfigCommand() *cobra.Command {
	var server, tokenFile, caFile string
	cmd := &cobra.Command{
		Use:   "kubeconfig",
		Short: "Print a kubeconfig whose contexts point kubectl at the fleetwatch daemon",
		Long: `Print a kubeconfig whose contexts point kubectl at a running fleetwatch daemon:
one context per cluster that the configuration selects, named after the cluster, and
a context "all" that reaches every cluster at once. The clusters come from the same
configuration (flags, FLEETWATCH_* variables, --config file) as "fleetwatch serve".

  fleetwatch kubeconfig --config fleetwatch.yaml > fleet.kubeconfig
  kubectl --kubeconfig fleet.kubeconfig --context all get pods -A`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(config.LoadOptions{Flags: cmd.Flags()})
			if err != nil {
				return err
			}
			if server == "" {
				scheme := "http"
				if cfg.Server.TLS.CertFile != "" {
					scheme = "https"
				}
				server = scheme + "://" + cfg.Server.Address
			}
			base, err := url.Parse(server)
			if err != nil || base.Host == "" || (base.Scheme != "http" && base.Scheme != "https") {
				return fmt.Errorf("--daemon: %q is not an http(s) URL", server)
			}
			clusters, err := cluster.Load(managerOptions(cfg).Clusters)
			if err != nil {
				return err
			}
			names := make([]string, 0, len(clusters))
			for _, c := range clusters {
				names = append(names, c.Name)
			}
			kc := daemonKubeconfig(strings.TrimSuffix(base.String(), "/"), names, tokenFile, caFile)
			data, err := clientcmd.Write(*kc)
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(data)
			return err
		},
	}
	config.BindFlags(cmd.Flags())
	cmd.Flags().StringVar(&server, "daemon", "", "URL of the daemon (default: from server.address and server.tls)")
	cmd.Flags().StringVar(&tokenFile, "token-file", "", "file holding the bearer token kubectl sends, if the daemon requires one")
	cmd.Flags().StringVar(&caFile, "certificate-authority", "", "CA file that signed the daemon's certificate, for https")
	return cmd
}

// daemonKubeconfig returns a kubeconfig with a context per cluster name, and "all".
func daemonKubeconfig(base string, names []string, tokenFile, caFile string) *clientcmdapi.Config {
	kc := clientcmdapi.NewConfig()
	kc.AuthInfos["fleetwatch"] = &clientcmdapi.AuthInfo{TokenFile: tokenFile}
	add := func(context, segment string) {
		kc.Clusters[context] = &clientcmdapi.Cluster{
			Server:               base + "/clusters/" + segment,
			CertificateAuthority: caFile,
		}
		kc.Contexts[context] = &clientcmdapi.Context{Cluster: context, AuthInfo: "fleetwatch"}
	}
	add(allContext, "*")
	for _, name := range names {
		if name == allContext {
			continue // the fleet-wide context wins; the cluster stays reachable through it
		}
		add(name, url.PathEscape(name))
	}
	kc.CurrentContext = allContext
	return kc
}
