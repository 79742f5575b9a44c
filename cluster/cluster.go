package cluster

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"net/url"
	"strings"

	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Cluster is one kubeconfig context that was selected by the include and exclude globs.
//
// A Cluster is immutable once Load or a Provider returned it, and it is shared: callers
// must not modify it, and must copy Config (rest.CopyConfig) before changing it.
type Cluster struct {
	// Name is the cluster name: the context name, or its alias. It is never empty.
	Name string
	// Context is the name of the kubeconfig context.
	Context string
	// Kubeconfig is the file that the context was read from.
	Kubeconfig string
	// Config connects to the cluster as the context says, with Options.QPS, Burst and
	// UserAgent applied. It has no timeout, so that it can be used for watches.
	Config *rest.Config
	// Fingerprint identifies the connection settings of the context: server, CA, TLS
	// server name, insecure flag, proxy, compression, client certificate and key, token or
	// token file, basic auth, impersonation, and exec or auth-provider configuration. Two
	// Clusters with the same Fingerprint connect the same way; a changed Fingerprint means
	// the cluster was replaced. The context's namespace is not part of it.
	//
	// It is a keyed hash (HMAC-SHA256) under a key that is random per process, so it gives
	// away nothing about the credentials, and it is only comparable within one process. It
	// is safe to log. Files (CA, client certificate and key, token file) are identified by
	// path, not content: client-go itself picks up files that are rotated in place.
	Fingerprint string
}

// Server returns the cluster's server URL with any password in it masked, for logs and
// messages.
func (c *Cluster) Server() string {
	if c.Config == nil {
		return ""
	}
	return redactURL(c.Config.Host)
}

// fingerprintKey keys the fingerprint hash. Being random per process, it keeps the
// fingerprint of a low-entropy secret (a basic-auth password) from being guessed offline.
var fingerprintKey = func() []byte {
	k := make([]byte, 32)
	_, _ = rand.Read(k) // crypto/rand.Read never fails; it crashes the program instead.
	return k
}()

// volatileAuthProviderKeys are auth-provider config keys that the provider itself
// rewrites in the kubeconfig file when it refreshes a token. Changes to them are not a
// new connection, and counting them would replace the cluster on every refresh.
var volatileAuthProviderKeys = []string{"id-token", "refresh-token", "access-token", "expiry", "expires-in", "expires-on"}

// connection holds the fields of a kubeconfig cluster and user entry that decide how
// fleetwatch connects. It is only ever hashed.
type connection struct {
	Server             string              `json:"server"`
	TLSServerName      string              `json:"tlsServerName"`
	Insecure           bool                `json:"insecure"`
	CAFile             string              `json:"caFile"`
	CAData             []byte              `json:"caData"`
	ProxyURL           string              `json:"proxyURL"`
	DisableCompression bool                `json:"disableCompression"`
	CertFile           string              `json:"certFile"`
	CertData           []byte              `json:"certData"`
	KeyFile            string              `json:"keyFile"`
	KeyData            []byte              `json:"keyData"`
	Token              string              `json:"token"`
	TokenFile          string              `json:"tokenFile"`
	Username           string              `json:"username"`
	Password           string              `json:"password"`
	Impersonate        string              `json:"impersonate"`
	ImpersonateUID     string              `json:"impersonateUID"`
	ImpersonateGroups  []string            `json:"impersonateGroups"`
	ImpersonateExtra   map[string][]string `json:"impersonateExtra"`
	AuthProvider       string              `json:"authProvider"`
	AuthProviderConfig map[string]string   `json:"authProviderConfig"`
	Exec               *execConnection     `json:"exec"`
}

type execConnection struct {
	Command            string                    `json:"command"`
	Args               []string                  `json:"args"`
	Env                []clientcmdapi.ExecEnvVar `json:"env"`
	APIVersion         string                    `json:"apiVersion"`
	ProvideClusterInfo bool                      `json:"provideClusterInfo"`
	InteractiveMode    string                    `json:"interactiveMode"`
}

// fingerprint hashes the connection settings of a kubeconfig cluster entry and its user
// entry (nil when the context names no user). File paths must already be resolved.
func fingerprint(kc *clientcmdapi.Cluster, ai *clientcmdapi.AuthInfo) string {
	c := connection{
		Server:             kc.Server,
		TLSServerName:      kc.TLSServerName,
		Insecure:           kc.InsecureSkipTLSVerify,
		CAFile:             kc.CertificateAuthority,
		CAData:             kc.CertificateAuthorityData,
		ProxyURL:           kc.ProxyURL,
		DisableCompression: kc.DisableCompression,
	}
	if ai != nil {
		c.CertFile = ai.ClientCertificate
		c.CertData = ai.ClientCertificateData
		c.KeyFile = ai.ClientKey
		c.KeyData = ai.ClientKeyData
		c.Token = ai.Token
		c.TokenFile = ai.TokenFile
		c.Username = ai.Username
		c.Password = ai.Password
		c.Impersonate = ai.Impersonate
		c.ImpersonateUID = ai.ImpersonateUID
		c.ImpersonateGroups = ai.ImpersonateGroups
		c.ImpersonateExtra = ai.ImpersonateUserExtra
		if ap := ai.AuthProvider; ap != nil {
			c.AuthProvider = ap.Name
			c.AuthProviderConfig = maps.Clone(ap.Config)
			for _, k := range volatileAuthProviderKeys {
				delete(c.AuthProviderConfig, k)
			}
		}
		if e := ai.Exec; e != nil {
			c.Exec = &execConnection{
				Command:            e.Command,
				Args:               e.Args,
				Env:                e.Env,
				APIVersion:         e.APIVersion,
				ProvideClusterInfo: e.ProvideClusterInfo,
				InteractiveMode:    string(e.InteractiveMode),
			}
		}
	}
	// Marshaling a struct of strings, byte slices and maps cannot fail, and encoding/json
	// sorts map keys, so equal settings give equal bytes.
	b, _ := json.Marshal(c)
	mac := hmac.New(sha256.New, fingerprintKey)
	mac.Write(b)
	return hex.EncodeToString(mac.Sum(nil)[:16])
}

// redactURL masks the password of a URL. A string with user info that does not parse is
// returned as "<unparseable URL>", since it might hold anything.
func redactURL(s string) string {
	if !strings.Contains(s, "@") {
		return s
	}
	u, err := url.Parse(s)
	if err != nil {
		return "<unparseable URL>"
	}
	return u.Redacted()
}
