// n8n's community-node lint (`npm run lint`): the rule sets of n8n's node starter
// (`@n8n/node-cli`'s eslint config, which `n8n-node lint` runs) and of n8n's own
// pre-verification scanner (`@n8n/scan-community-package`): every rule of
// `@n8n/eslint-plugin-community-nodes`' recommended config, and
// `eslint-plugin-n8n-nodes-base`'s `community` (package.json), `credentials` and `nodes`
// rules with the same three overrides n8n switches off. Warnings fail it too
// (`--max-warnings 0` in package.json).
import { n8nCommunityNodesPlugin } from '@n8n/eslint-plugin-community-nodes';
import tsParser from '@typescript-eslint/parser';
import n8nNodesBase from 'eslint-plugin-n8n-nodes-base';
import { defineConfig, globalIgnores } from 'eslint/config';

export default defineConfig(
	globalIgnores(['dist', 'node_modules', 'test', 'scripts']),
	{
		files: ['**/*.ts'],
		extends: [n8nCommunityNodesPlugin.configs.recommended],
		languageOptions: { parser: tsParser },
		rules: { 'no-console': 'error' },
	},
	{ plugins: { 'n8n-nodes-base': n8nNodesBase } },
	{
		files: ['package.json'],
		extends: [n8nCommunityNodesPlugin.configs.recommended],
		rules: { ...n8nNodesBase.configs.community.rules },
		languageOptions: { parser: tsParser, parserOptions: { extraFileExtensions: ['.json'] } },
	},
	{
		files: ['credentials/**/*.ts'],
		rules: {
			...n8nNodesBase.configs.credentials.rules,
			'n8n-nodes-base/cred-class-field-documentation-url-miscased': 'off',
			'n8n-nodes-base/cred-class-field-type-options-password-missing': 'off',
		},
	},
	{
		files: ['nodes/**/*.ts'],
		rules: {
			...n8nNodesBase.configs.nodes.rules,
			'n8n-nodes-base/node-class-description-inputs-wrong-regular-node': 'off',
			'n8n-nodes-base/node-class-description-outputs-wrong': 'off',
			'n8n-nodes-base/node-param-type-options-max-value-present': 'off',
		},
	},
);
