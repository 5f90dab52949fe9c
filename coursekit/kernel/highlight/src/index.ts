// The `rust-pytorch` kernel's cells in JupyterLab: Rust, except a cell whose first line is
// `%%python`, whose body is highlighted as Python. The kernel's language_info names this
// language ("rust-pytorch") with Rust's MIME type, so a JupyterLab without this extension
// still shows Rust.
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { IEditorLanguageRegistry } from '@jupyterlab/codemirror';
import { LanguageSupport, LRLanguage } from '@codemirror/language';
import { parseMixed } from '@lezer/common';

const PYTHON_MAGIC = /^\s*%%python[ \t]*(\r?\n|$)/;

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'coursekit-rust-pytorch:language',
  description: 'Rust cells, and %%python cells highlighted as Python',
  autoStart: true,
  requires: [IEditorLanguageRegistry],
  activate: (app: JupyterFrontEnd, languages: IEditorLanguageRegistry) => {
    languages.addLanguage({
      name: 'rust-pytorch',
      displayName: 'Rust + PyTorch',
      mime: 'text/x-rust-pytorch',
      extensions: [],
      async load() {
        const rust = await languages.getLanguage('rust');
        const python = await languages.getLanguage('python');
        if (!rust?.support || !python?.support) {
          throw new Error('JupyterLab has no Rust or Python language to mix');
        }
        const pythonParser = python.support.language.parser;
        const mixed = (rust.support.language as LRLanguage).configure(
          {
            wrap: parseMixed((node, input) => {
              if (!node.type.isTop) {
                return null;
              }
              const magic = PYTHON_MAGIC.exec(input.read(0, Math.min(input.length, 200)));
              // The body after the magic line is Python; the magic line stays as it is.
              return magic
                ? { parser: pythonParser, overlay: [{ from: magic[0].length, to: input.length }] }
                : null;
            })
          },
          'rust-pytorch'
        );
        return new LanguageSupport(mixed, rust.support.support);
      }
    });
  }
};

export default plugin;
