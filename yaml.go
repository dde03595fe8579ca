package edgeplane

import (
	"errors"

	"go.yaml.in/yaml/v3"
)

// parseYAMLMapping reports whether s is a YAML document whose top level is a mapping, as a
// traffic policy document must be.
func parseYAMLMapping(s string) error {
	var doc any
	if err := yaml.Unmarshal([]byte(s), &doc); err != nil {
		return err
	}
	if _, ok := doc.(map[string]any); !ok {
		return errors.New("the top level is not a mapping")
	}
	return nil
}
