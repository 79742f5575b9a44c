package config

import (
	"cmp"
	"fmt"
	"os"
	"slices"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// LoadOptions say where Load reads the configuration. The zero value reads the defaults
// and the FLEETWATCH_* environment variables, and no file.
type LoadOptions struct {
	// File is the config file, YAML. Default: the value of the --config flag (ConfigFlag)
	// if Flags defines it and it was set, else $FLEETWATCH_CONFIG (ConfigEnv), else no
	// file. A file that is named but cannot be read is an error.
	File string

	// Flags are the parsed command-line flags, usually defined by BindFlags. Only flags
	// set on the command line override; flags that Flags does not define are skipped.
	// Default: none.
	Flags *pflag.FlagSet

	// LookupEnv reads environment variables. Default: os.LookupEnv.
	LookupEnv func(key string) (string, bool)
}

// Load reads the configuration and validates it. Every key comes from the first of these
// that sets it: a flag set on the command line, its FLEETWATCH_* environment variable,
// the config file, the default (see Default). A layer replaces a leaf key as a whole:
// a list or the aliases map from the environment replaces the file's, it is not merged.
// An empty resources list is replaced by DefaultResources.
//
// The file is parsed strictly: an unknown key, a key defined twice, or a value of the
// wrong type is an error that names the key and its line. If anything is wrong, Load
// returns no Config and an error that joins every problem (see FieldError), each
// matching ErrInvalid. An error reading the file does not match ErrInvalid.
func Load(opts LoadOptions) (*Config, error) {
	s, err := readSources(opts)
	if err != nil {
		return nil, err
	}
	c, err := s.merge()
	if err != nil {
		return nil, err
	}
	if problems := s.problems(c); len(problems) > 0 {
		return nil, joinFieldErrors(problems)
	}
	return c, nil
}

// sources are the layers that Load merges.
type sources struct {
	file       *fileLayer
	env, flags layer
}

// FileName returns the config file that Load reads, as File documents; "" if none.
func (opts LoadOptions) FileName() string {
	if opts.File != "" {
		return opts.File
	}
	if f := flagOf(opts.Flags, ConfigFlag); f != nil && f.Changed {
		return f.Value.String()
	}
	name, _ := opts.lookupEnv()(ConfigEnv)
	return name
}

func (opts LoadOptions) lookupEnv() func(string) (string, bool) {
	if opts.LookupEnv == nil {
		return os.LookupEnv
	}
	return opts.LookupEnv
}

// readSources reads the file, the environment and the flags of opts.
func readSources(opts LoadOptions) (*sources, error) {
	name := opts.FileName()
	s := &sources{file: &fileLayer{layer: newLayer()}, env: parseEnv(opts.lookupEnv())}
	if name != "" {
		data, err := os.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		s.file = parseFile(name, data)
	}
	var err error
	if s.flags, err = parseFlags(opts.Flags); err != nil {
		return nil, err
	}
	return s, nil
}

// merge has viper lay the file, the environment and the flags over the defaults, each
// over the one below, and decode the result.
func (s *sources) merge() (*Config, error) {
	v := viper.New()
	def := Default()
	for i := range leaves {
		v.SetDefault(leaves[i].path, leaves[i].value(&def))
	}
	for _, ly := range []*layer{&s.file.layer, &s.env, &s.flags} {
		if err := v.MergeConfigMap(ly.values); err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
	}
	var c Config
	if err := v.Unmarshal(&c); err != nil {
		// Not expected: every layer holds values of the types of Config.
		return nil, fmt.Errorf("config: %w", err)
	}
	c.normalize()
	return &c, nil
}

// problems returns the problems of the sources and of c, located, without repeats:
// those in the file first, in the order of its lines.
func (s *sources) problems(c *Config) []*FieldError {
	problems := slices.Concat(s.file.errs, s.env.errs, s.flags.errs)
	for _, fe := range c.validate() {
		if s.locate(fe) {
			problems = append(problems, fe)
		}
	}
	// A problem inside a YAML anchor is found again at each merge of it into the same
	// mapping.
	seen := map[string]bool{}
	problems = slices.DeleteFunc(problems, func(fe *FieldError) bool {
		msg := fe.Error()
		dup := seen[msg]
		seen[msg] = true
		return dup
	})
	inFile := func(fe *FieldError) int {
		if fe.File != "" {
			return 0
		}
		return 1
	}
	slices.SortStableFunc(problems, func(a, b *FieldError) int {
		return cmp.Or(cmp.Compare(inFile(a), inFile(b)), cmp.Compare(a.Line, b.Line))
	})
	return problems
}

func flagOf(fs *pflag.FlagSet, name string) *pflag.Flag {
	if fs == nil {
		return nil
	}
	return fs.Lookup(name)
}

// origin returns the layer that set the leaf holding key, or nil for a default.
func (s *sources) origin(key string) (*layer, *leaf) {
	l := leafOf(key)
	if l == nil {
		return nil, nil
	}
	for _, ly := range []*layer{&s.flags, &s.env, &s.file.layer} {
		if ly.set[l.path] {
			return ly, l
		}
	}
	return nil, l
}

// locate sets where the value behind a validation problem came from. It returns false
// when the problem follows from a value that was already reported as unusable.
func (s *sources) locate(fe *FieldError) bool {
	at := cmp.Or(fe.at, fe.Key)
	for _, k := range []string{fe.Key, at} {
		if ly, _ := s.origin(k); ly != nil && ly.isBad(k) {
			return false
		}
	}
	ly, l := s.origin(at)
	switch ly {
	case nil:
	case &s.flags:
		fe.Flag = l.flag
	case &s.env:
		fe.Env = l.env
	default:
		fe.File, fe.Line = s.file.name, s.file.line(at)
	}
	return true
}
